"""What the router must know of verl's rollout servers to cut a turn into pieces exactly.

A verl server actor's ``generate`` fills in what the caller leaves out: ``max_tokens``
defaults to ``min(response_length, prompt_length + response_length - len(prompt))``, clamped
to the model's length; ``ignore_eos`` and ``repetition_penalty`` default to the rollout
config's. A turn cut into pieces must carry the same budget and settings on every piece, so
the router reads them once from the server (vLLM: ``get_rollout_config()``; SGLang servers
have no such method: the YAML's ``response_length`` / ``prompt_length`` stand in).

vLLM's server reports a stop at EOS and a stop at ``max_tokens`` alike (``"completed"``). A
piece that ends exactly at its cap on a stop token has ended the turn; the router tells it
from a cut by the model's stop ids: the YAML's ``eos_token_ids``, else the generation config
at ``model_path``, else at the model directory the vLLM server reports as its ``/v1/models``
root. Without them, turns run in one piece (no mid-turn moves; the reason is reported).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tailsieve.errors import ReplicaError
from tailsieve.integrations.verl.router_config import VerlRouterConfig
from tailsieve.integrations.verl.slots import ServerSlots
from tailsieve.runtime.engine.http_runner import HttpPieceRunner

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """The rollout settings every server of the pool shares."""

    response_length: int | None  # rollout.response_length (None: unknown)
    prompt_length: int | None  # rollout.prompt_length
    max_model_len: int | None  # the engine's context length (None: prompt + response)
    ignore_eos: bool = False  # the servers' default
    repetition_penalty: float = 1.0  # the servers' default
    full_determinism: bool = False  # seeds per replica: routing must not depend on timing
    eos_token_ids: frozenset[int] | None = None  # None: unknown
    reserve_tokens: int = 0  # SGLang keeps one token of the context free

    def budget(self, prompt_len: int, sampling: Mapping[str, Any]) -> int | None:
        """The ``max_tokens`` the server would apply to this prompt (None: unknown)."""
        asked = sampling.get("max_tokens", sampling.get("max_new_tokens"))
        if asked is not None:
            want = int(asked)
        elif self.response_length is not None and self.prompt_length is not None:
            r, p = self.response_length, self.prompt_length
            want = min(r, p + r - prompt_len)
        else:
            return None
        ctx = self.max_model_len
        if ctx is None and self.response_length is not None and self.prompt_length is not None:
            ctx = self.prompt_length + self.response_length
        if ctx is not None:
            want = min(want, ctx - prompt_len - self.reserve_tokens)
        return max(1, want)

    def stop_ids(self, sampling: Mapping[str, Any]) -> frozenset[int] | None:
        """Token ids that end a turn under ``sampling`` (None: unknown)."""
        extra = frozenset(int(t) for t in (sampling.get("stop_token_ids") or ()))
        if bool(sampling.get("ignore_eos", self.ignore_eos)):
            return extra
        if self.eos_token_ids is None:
            return None
        return self.eos_token_ids | extra


def facts_from_rollout_config(cfg: Any, eos: frozenset[int] | None) -> ServerFacts:
    """From verl's ``RolloutConfig`` (what ``get_rollout_config()`` returns)."""

    def get(name: str, default: Any = None) -> Any:
        return getattr(cfg, name, default) if not isinstance(cfg, Mapping) else cfg.get(
            name, default)

    max_len = get("max_model_len")
    return ServerFacts(
        response_length=_int_or_none(get("response_length")),
        prompt_length=_int_or_none(get("prompt_length")),
        max_model_len=_int_or_none(max_len),
        ignore_eos=bool(get("ignore_eos", False)),
        repetition_penalty=float(get("repetition_penalty", 1.0) or 1.0),
        full_determinism=bool(get("full_determinism", False)),
        eos_token_ids=eos,
        reserve_tokens=1 if str(get("name", "")) == "sglang" else 0,
    )


async def read_facts(config: VerlRouterConfig, slots: ServerSlots) -> ServerFacts:
    """The pool's facts: vLLM servers report their rollout config; SGLang servers report
    none but say ``stop`` / ``length`` exactly, so they need no stop ids (their budget comes
    from the YAML's ``response_length`` / ``prompt_length``)."""
    cfg = await read_rollout_config([h for h in slots.handles if h is not None])
    known = config.eos_token_ids
    if cfg is None:
        return ServerFacts(config.response_length, config.prompt_length, None,
                           eos_token_ids=frozenset(known or ()))
    eos = frozenset(known) if known is not None else await discover_eos(
        config.model_path, slots.active())
    return facts_from_rollout_config(cfg, eos)


async def read_rollout_config(handles: Sequence[Any]) -> Any | None:
    """The first server's ``get_rollout_config()`` (None when no server has the method)."""
    for h in handles:
        try:
            return await asyncio.wait_for(h.get_rollout_config.remote(), PROBE_TIMEOUT_S)
        except Exception as exc:
            log.info("tailsieve router: get_rollout_config unavailable (%s)", exc)
    return None


async def discover_eos(model_path: str | None, server_ids: Sequence[str]) -> frozenset[int] | None:
    """The model's stop ids from ``model_path``, else from the model directory a vLLM server
    reports as its ``/v1/models`` root (``server_ids`` are verl's ``host:port``)."""
    paths = [model_path] if model_path else []
    if not paths:
        for sid in server_ids[:2]:
            root = await _served_root(sid)
            if root:
                paths.append(root)
                break
    for path in paths:
        ids = await asyncio.to_thread(eos_ids_at, path)
        if ids:
            return ids
    return None


def eos_ids_at(path: str) -> frozenset[int] | None:
    """EOS ids of the model directory ``path`` (generation config, then model config; None
    if it is not a local directory or neither can be read: no hub look-ups)."""
    if not os.path.isdir(path):
        return None
    try:
        from transformers import AutoConfig, GenerationConfig
    except ImportError:
        return None
    found: set[int] = set()
    for loader in (GenerationConfig.from_pretrained, AutoConfig.from_pretrained):
        try:
            found |= _as_ids(getattr(loader(path), "eos_token_id", None))
        except Exception as exc:
            log.debug("tailsieve router: no eos ids from %s (%s)", path, exc)
    return frozenset(found) or None


async def _served_root(server_id: str) -> str | None:
    url = server_id if server_id.startswith("http") else f"http://{server_id}"
    runner = HttpPieceRunner([url], health_timeout_s=PROBE_TIMEOUT_S)
    try:
        card = await runner.models.card(0)
    except ReplicaError:
        return None
    finally:
        await runner.aclose()
    return card.root if card is not None else None


def _as_ids(value: Any) -> set[int]:
    if value is None:
        return set()
    if isinstance(value, int):
        return {value}
    return {int(v) for v in value}


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)
