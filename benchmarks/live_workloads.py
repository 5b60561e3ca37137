"""The requests ``bench_routers_live.py`` sends through every router: the same lengths for all.

``single``: GRPO groups (``group_size`` requests sharing one prompt), every request sent at
once, each forced to its drawn length (``ignore_eos``), with no session key. ``agentic``:
sessions (GRPO groups sharing a first prompt) of several turns; each later turn sends the
session's whole context (prompt, the outputs as the emulator's filler ids, a tool observation
of fresh ids) after a tool wait, keyed by ``X-Session-ID`` (TailSieve and vllm-router's
sticky key) and ``X-SMG-Routing-Key`` (smg's). Prompts are token ids unique to a run (an
``id_base``), so no run finds another's prefixes cached; they go as text (``as_text``), since
smg refuses token-id prompts. The wall time is from the first
request sent to the last answer.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import numpy as np

MODEL = "tailsieve-emulated"
FILLER_TOKEN_ID = 42  # the emulator's generated-token id (responses.FILLER_TOKEN_ID)
ID_LIMIT = 100_000  # token ids drawn below this (the emulator keeps no vocabulary)


@dataclass(frozen=True, slots=True)
class SingleTurn:
    """A single-turn step: ``prompt_tokens[g]`` and ``output_tokens[g][i]`` of group g."""

    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[tuple[int, ...], ...]

    @property
    def num_requests(self) -> int:
        return sum(len(g) for g in self.output_tokens)


@dataclass(frozen=True, slots=True)
class Session:
    """One agentic trajectory: its group, first prompt, and per turn (output, tool wait)."""

    key: str
    group: int
    output_tokens: tuple[int, ...]  # one per turn
    tool_tokens: tuple[int, ...]  # the observation before each later turn
    tool_wait_s: tuple[float, ...]  # model seconds before each later turn


@dataclass(frozen=True, slots=True)
class Agentic:
    """An agentic step: the sessions and each group's first-prompt length."""

    prompt_tokens: tuple[int, ...]
    sessions: tuple[Session, ...]


def _lengths(rng: np.random.Generator, n: int, median: float, sigma: float, lo: int,
             hi: int) -> list[int]:
    draw = rng.lognormal(np.log(median), sigma, size=n)
    return [int(x) for x in np.clip(np.round(draw), lo, hi)]


def make_single(rng: np.random.Generator, num_requests: int, group_size: int,
                median_tokens: float, sigma: float, max_tokens: int) -> SingleTurn:
    """``num_requests`` in groups of ``group_size``, lognormal lengths (varied per group)."""
    if num_requests < 1 or group_size < 1 or num_requests % group_size:
        raise ValueError(f"requests ({num_requests}) must be a positive multiple of the group "
                         f"size ({group_size})")
    groups = num_requests // group_size
    prompts = [int(x) for x in rng.integers(128, 1024, size=groups)]
    scale = rng.lognormal(0.0, 0.5, size=groups)  # some groups' answers run longer
    outs = tuple(tuple(_lengths(rng, group_size, median_tokens * float(s), sigma, 16,
                                max_tokens)) for s in scale)
    return SingleTurn(tuple(prompts), outs)


def make_agentic(rng: np.random.Generator, num_sessions: int, group_size: int,
                 turns: tuple[int, int], median_tokens: float, sigma: float, max_tokens: int,
                 tool_s: float) -> Agentic:
    """``num_sessions`` trajectories of ``turns[0]..turns[1]`` turns, groups of ``group_size``
    sharing a first prompt; tool waits lognormal around ``tool_s`` model seconds."""
    if num_sessions < 1 or group_size < 1 or num_sessions % group_size:
        raise ValueError(f"sessions ({num_sessions}) must be a positive multiple of the group "
                         f"size ({group_size})")
    groups = num_sessions // group_size
    prompts = tuple(int(x) for x in rng.integers(256, 2048, size=groups))
    sessions = []
    for k in range(num_sessions):
        n = int(rng.integers(turns[0], turns[1] + 1))
        sessions.append(Session(
            key=f"s{k}", group=k // group_size,
            output_tokens=tuple(_lengths(rng, n, median_tokens, sigma, 16, max_tokens)),
            tool_tokens=tuple(int(x) for x in rng.integers(32, 256, size=n - 1)),
            tool_wait_s=tuple(float(x) for x in rng.lognormal(np.log(tool_s), 0.5,
                                                                size=n - 1))))
    return Agentic(prompts, tuple(sessions))


def as_text(ids: list[int]) -> str:
    """Token ids as text the emulator reads back as those ids (a word ``t<N>`` is id N):
    smg takes only text prompts, so every router is sent text."""
    return " ".join(f"t{i}" for i in ids)


class Client:
    """Sends a workload through one router's URL (one aiohttp session, no connection cap)."""

    def __init__(self, http: aiohttp.ClientSession, url: str, id_base: int,
                 time_scale: float) -> None:
        self.http, self.url, self.time_scale = http, url, time_scale
        self.run_tag = f"r{id_base}"  # session keys unique to the run (routers stay up)
        self._rng = np.random.default_rng(id_base)
        self.num_tokens = 0
        self.t0 = 0.0
        self.timeline: list[tuple[float, float, int]] = []  # per request: sent, answered
        # (seconds after the run's start), tokens

    def fresh(self, n: int) -> list[int]:
        return [int(x) for x in self._rng.integers(1000, ID_LIMIT, size=n)]

    async def complete(self, prompt: list[int], max_tokens: int,
                       key: str | None = None) -> int:
        """One forced-length completion; its generated token count (checked)."""
        body = {"model": MODEL, "prompt": as_text(prompt), "max_tokens": max_tokens,
                "ignore_eos": True, "temperature": 1.0}
        headers = {"X-Session-ID": key, "X-SMG-Routing-Key": key} if key else {}
        sent = time.perf_counter() - self.t0
        async with self.http.post(self.url + "/v1/completions", json=body,
                                  headers=headers) as r:
            text = await r.text()
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status} from {self.url}: {text[:300]}")
        got: dict[str, Any] = json.loads(text)
        n = int(got["usage"]["completion_tokens"])
        if n != max_tokens:
            raise RuntimeError(f"{key or 'request'}: {n} tokens, asked {max_tokens}")
        self.num_tokens += n
        self.timeline.append((sent, time.perf_counter() - self.t0, n))
        return n

    async def single(self, step: SingleTurn) -> float:
        prompts = [self.fresh(n) for n in step.prompt_tokens]
        self.t0 = t0 = time.perf_counter()
        await asyncio.gather(*(self.complete(prompts[g], n)
                               for g, outs in enumerate(step.output_tokens) for n in outs))
        return time.perf_counter() - t0

    async def _session(self, s: Session, prompt: list[int]) -> None:
        ctx = list(prompt)
        for t, out in enumerate(s.output_tokens):
            if t:
                await asyncio.sleep(s.tool_wait_s[t - 1] * self.time_scale)
                ctx += self.fresh(s.tool_tokens[t - 1])
            n = await self.complete(ctx, out, f"{s.key}-{self.run_tag}")
            ctx += [FILLER_TOKEN_ID] * n

    async def agentic(self, step: Agentic) -> float:
        prompts = [self.fresh(n) for n in step.prompt_tokens]
        self.t0 = t0 = time.perf_counter()
        await asyncio.gather(*(self._session(s, prompts[s.group]) for s in step.sessions))
        return time.perf_counter() - t0
