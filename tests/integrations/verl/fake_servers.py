"""In-process stand-ins for verl server actor handles, over a deterministic toy model.

``FakeServer`` has a verl server actor's methods as handles have them
(``handle.generate.remote(...)`` is awaitable) and generates from ``toy_next``: the next token
is a function of the whole prefix, so a turn continued from any seam on any server yields
exactly the tokens of one unbroken request (the property a real engine has under greedy
sampling). It can be made to die (``RayActorError`` from then on) or to abort its running
requests, and records every call.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ray.exceptions import ActorDiedError
from verl.workers.rollout.replica import TokenOutput

EOS = 2


def toy_next(prefix: list[int]) -> int:
    """The toy model's next token after ``prefix`` (EOS now and then)."""
    h = 0
    for t in prefix[-8:]:
        h = (h * 1_000_003 + t + 1) % 2_147_483_647
    return EOS if h % 23 == 0 else 3 + h % 200


def toy_generate(prompt: list[int], max_tokens: int) -> list[int]:
    """One unbroken request: tokens until EOS (kept) or ``max_tokens``."""
    out: list[int] = []
    while len(out) < max_tokens:
        t = toy_next(prompt + out)
        out.append(t)
        if t == EOS:
            break
    return out


def long_prompt(min_tokens: int, start: int = 3) -> list[int]:
    """A two-token prompt whose unbroken answer runs at least ``min_tokens`` tokens."""
    p = start
    while len(toy_generate([p, p + 1], min_tokens)) < min_tokens:
        p += 1
    return [p, p + 1]


class _Method:
    def __init__(self, fn: Any) -> None:
        self._fn = fn

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn(*args, **kwargs)


@dataclass
class FakeServer:
    """A verl server actor handle over the toy model (module docstring)."""

    name: str
    rollout: dict[str, Any]
    token_s: float = 0.0  # seconds per generated token
    version: int = 0  # the weights' global_steps it reports
    dead: bool = False
    calls: list[dict[str, Any]] = field(default_factory=list)
    _abort: asyncio.Event | None = None

    def __post_init__(self) -> None:
        self.generate = _Method(self._generate)
        self.get_rollout_config = _Method(self._config)
        self.get_server_address = _Method(self._address)

    async def _config(self) -> dict[str, Any]:
        return dict(self.rollout)

    async def _address(self) -> tuple[str, int]:
        if self.dead:
            raise ActorDiedError()
        return self.name, 0

    def abort_all(self) -> None:
        if self._abort is not None:
            self._abort.set()

    async def _generate(self, prompt_ids: list[int], sampling_params: dict[str, Any],
                        request_id: str, **kwargs: Any) -> TokenOutput:
        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids),
                           "sampling": dict(sampling_params), **kwargs})
        if self.dead:
            raise ActorDiedError()
        r = self.rollout
        cap = sampling_params.get("max_tokens")
        if cap is None:
            cap = min(r["response_length"], r["prompt_length"] + r["response_length"]
                      - len(prompt_ids))
        cap = max(1, min(int(cap), r["max_model_len"] - len(prompt_ids)))
        if self._abort is None:
            self._abort = asyncio.Event()
        out: list[int] = []
        while len(out) < cap:
            if self.token_s:
                await asyncio.sleep(self.token_s)
            if self.dead:
                raise ActorDiedError()
            if self._abort.is_set():
                self._abort = asyncio.Event()
                return TokenOutput(token_ids=out, log_probs=None, stop_reason="aborted",
                                   extra_fields={"global_steps": self.version})
            t = toy_next(list(prompt_ids) + out)
            out.append(t)
            if t == EOS:
                break
        lps = [-0.01 * t for t in out] if sampling_params.get("logprobs") else None
        return TokenOutput(token_ids=out, log_probs=lps, stop_reason="completed",
                           num_preempted=0,
                           extra_fields={"global_steps": self.version,
                                         "num_cached_tokens": 0})
