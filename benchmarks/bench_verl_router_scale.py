"""The verl router at scale: per-turn overhead and the router's CPU against verl's default.

verl's default router (``GlobalRequestLoadBalancer`` in ``verl/workers/rollout/router.py``)
answers two small calls per turn (``acquire_server``, ``release_server``); the client then
calls the server itself. TailSieve's router (``VerlSessionRouter``, the class behind the
``TailSieveRouter`` actor) also runs every turn's generation: ``generate_turn`` on the router's
one event loop, each piece one ``generate`` call from there to a server. This benchmark runs
both at ``--servers`` 64 and ``--in-flight`` 4,096 trajectories, each turn acquired, generated
and released as verl's ``LLMServerClient`` does, and measures

- per-turn overhead: the turn's wall time (acquire to release) minus the time its server
  calls spent generating, p50 / p99 (router decisions, bookkeeping and event-loop queueing);
- CPU per turn: the process's CPU time (``time.process_time``) over the measured turns. The
  ``direct`` row is the harness alone (the client picks the server itself: no router), so a
  router's own CPU per turn is its row minus ``direct``;
- the router's share of one core at GPU speed: its own CPU per turn times the turn rate the
  servers sustain at ``--time-scale 1`` (the servers run ``--time-scale`` faster here);
- server batch: the mean number of calls running per server (64 = every trajectory's turn is
  on a server; lower: turns wait in the router).

Servers are in-process fakes with a verl server actor's methods (``generate.remote`` awaited),
timed by the ``--profile`` (default ``qwen3-4b-h100``): a call of ``n`` tokens sleeps
``n * tau(b) * time_scale`` with ``b`` the calls running on that server. A turn's length is
written in its prompt (``MARK, 1000 + L``), so every answer is checked token-exact (``L``
filler tokens then EOS, across pieces and moves). Everything runs on one asyncio loop, as a
Ray async actor runs (the ``VerlSessionRouter`` code itself, without Ray's RPCs and
serialization, which add the same per-call cost to both routers).

``--shards N`` measures one of ``N`` TailSieve router actors (the YAML's ``shards``): this
process runs ``in_flight / N`` trajectories over all the servers, as each shard does, and
the summary prices the actor's share at ``1 / N`` of the turn rate. (A shard's fake servers
see only its calls, so they run at a smaller batch: under this profile tau(16) is within 7%
of tau(64).)

verl's router: the installed class when ``verl`` imports (``.venv-verl``, made by
``scripts/setup_verl.sh``), else a reimplementation of verl 0.9.1's policy (sticky LRU of
10,000 request ids, a new one to a random server among the fewest in flight), named in the
results (``implementation``). TailSieve's router needs verl's ``TokenOutput``: without verl, a
pydantic model with its fields stands in and the package ``__init__`` (which imports verl's
trainer) is skipped.

    .venv/bin/python benchmarks/bench_verl_router_scale.py \\
        --out benchmarks/results/verl_router_scale.json
    .venv/bin/python benchmarks/bench_verl_router_scale.py --shards 4 --routers direct,tailsieve \\
        --out benchmarks/results/verl_router_scale_shards4.json
    .venv-verl/bin/python benchmarks/bench_verl_router_scale.py \\
        --out benchmarks/results/verl_router_scale_verl.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import functools
import importlib
import json
import os
import platform
import random
import sys
import time
import types
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from outdir import command_line, default_out

from tailsieve.model.profiles import load_profile
from tailsieve.model.throughput import ThroughputModel
from tailsieve.runtime.event_loop import run as run_on_loop

EOS, MARK, FILLER, LEN_BASE = 2, 3, 5, 1000
RESPONSE_LEN = 4096
ROLLOUT: dict[str, Any] = {
    "name": "vllm", "prompt_length": 32768, "response_length": RESPONSE_LEN,
    "max_model_len": 65536, "ignore_eos": False, "repetition_penalty": 1.0,
    "full_determinism": False, "enable_rollout_routing_replay": False}
ROUTERS = ("direct", "verl", "tailsieve")


@functools.cache
def verl_available() -> bool:
    """verl itself imports (asked once, before any stand-in is installed)."""
    try:
        importlib.import_module("verl.workers.rollout.replica")
    except ImportError:
        return False
    return True


def _shim_verl() -> None:
    """Without verl: its ``TokenOutput`` (a pydantic model, the same fields), and the router's
    package without its ``__init__`` (which imports verl's trainer)."""
    from pydantic import BaseModel

    class TokenOutput(BaseModel):
        token_ids: list[int]
        log_probs: list[float] | None = None
        routed_experts: Any = None
        stop_reason: str | None = None
        num_preempted: int | None = None
        extra_fields: dict[str, Any] = {}

    for name in ("verl", "verl.workers", "verl.workers.rollout"):
        sys.modules.setdefault(name, types.ModuleType(name))
    replica = types.ModuleType("verl.workers.rollout.replica")
    replica.TokenOutput = TokenOutput  # type: ignore[attr-defined]
    sys.modules["verl.workers.rollout.replica"] = replica
    import tailsieve.integrations as integ

    pkg = types.ModuleType("tailsieve.integrations.verl")
    pkg.__path__ = [str(Path(integ.__file__).parent / "verl")]
    sys.modules["tailsieve.integrations.verl"] = pkg


def token_output_class() -> Any:
    if not verl_available():
        _shim_verl()
    return importlib.import_module("verl.workers.rollout.replica").TokenOutput


class VerlDefault:
    """verl 0.9.1's ``GlobalRequestLoadBalancer`` policy (used when verl is not installed):
    sticky by request id (an LRU of 10,000), a new id to a random server among the fewest in
    flight; release counts down."""

    def __init__(self, servers: dict[str, Any], max_cache_size: int = 10000) -> None:
        self._servers = dict(servers)
        self._inflight = {sid: 0 for sid in servers}
        self._sticky: OrderedDict[str, str] = OrderedDict()
        self._max = max_cache_size

    def acquire_server(self, request_id: str) -> tuple[str, Any]:
        sid = self._sticky.get(request_id)
        if sid is not None and sid in self._inflight:
            self._sticky.move_to_end(request_id)
        else:
            low = min(self._inflight.values())
            sid = random.choice([s for s, c in self._inflight.items() if c == low])
            self._sticky[request_id] = sid
            if len(self._sticky) > self._max:
                self._sticky.popitem(last=False)
        self._inflight[sid] += 1
        return sid, self._servers[sid]

    def release_server(self, server_id: str, request_id: str | None = None) -> None:
        if self._inflight.get(server_id, 0) > 0:
            self._inflight[server_id] -= 1


def verl_router(servers: dict[str, Any]) -> tuple[Any, str]:
    """verl's default router object and which implementation it is."""
    if verl_available():
        from verl.workers.rollout.router import GlobalRequestLoadBalancer
        return GlobalRequestLoadBalancer(servers), "verl 0.9.1 GlobalRequestLoadBalancer"
    return VerlDefault(servers), "reimplemented from verl 0.9.1 (verl not installed)"


# ----- servers ------------------------------------------------------------------------------
@dataclass(slots=True)
class TurnClock:
    """Seconds a turn's server calls spent generating (set per turn by the client)."""

    server_s: float = 0.0
    calls: int = 0


CLOCK: contextvars.ContextVar[TurnClock | None] = contextvars.ContextVar("clock", default=None)


class _Method:
    def __init__(self, fn: Any) -> None:
        self._fn = fn

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn(*args, **kwargs)


@dataclass
class FakeServer:
    """A verl vLLM server actor handle: ``generate`` answers the length written in the prompt
    (``MARK, 1000 + L``, the filler tokens after it already generated), timed by the profile."""

    model: ThroughputModel
    time_scale: float
    token_output: Any
    running: int = 0
    busy_integral: float = 0.0  # running calls x seconds
    _since: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        self.generate = _Method(self._generate)
        self.get_rollout_config = _Method(self._config)
        self.get_server_address = _Method(self._address)

    async def _config(self) -> dict[str, Any]:
        return dict(ROLLOUT)

    async def _address(self) -> tuple[str, int]:
        return ("127.0.0.1", 0)

    def _account(self, delta: int) -> None:
        now = time.perf_counter()
        self.busy_integral += self.running * (now - self._since)
        self._since, self.running = now, self.running + delta

    async def _generate(self, request_id: str, prompt_ids: list[int],
                        sampling_params: dict[str, Any], **_: Any) -> Any:
        at = len(prompt_ids) - 1 - prompt_ids[::-1].index(MARK)
        want = int(prompt_ids[at + 1]) - LEN_BASE
        done = len(prompt_ids) - at - 2
        cap = int(sampling_params.get("max_tokens") or RESPONSE_LEN)
        n = min(want - done, cap)
        self._account(+1)
        t0 = time.perf_counter()
        try:
            await asyncio.sleep(n * self.model.tau(self.running) * self.time_scale)
        finally:
            self._account(-1)
        clock = CLOCK.get()
        if clock is not None:
            clock.server_s += time.perf_counter() - t0
            clock.calls += 1
        ids = [FILLER] * n
        if done + n == want:
            ids[-1] = EOS
        return self.token_output(token_ids=ids, stop_reason="completed", extra_fields={})


# ----- the run ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Shape:
    """The workload: ``in_flight`` trajectory slots, each running trajectories of ``turns``
    turns back to back (a new one, with a new id and prompt, when one ends) for
    ``warmup_s + duration_s``; ``group_size`` neighbouring slots share a first prompt."""

    servers: int = 64
    in_flight: int = 4096
    turns: int = 3
    group_size: int = 8
    prompt_tokens: int = 512
    user_tokens: int = 64
    median_tokens: float = 512.0
    sigma: float = 1.0
    time_scale: float = 1.0
    warmup_s: float = 15.0
    duration_s: float = 60.0
    profile: str = "qwen3-4b-h100"
    shards: int = 1  # TailSieve router actors: this process runs one, in_flight / shards
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("servers", "in_flight", "turns", "group_size", "prompt_tokens", "shards"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("time_scale", "duration_s", "median_tokens"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.warmup_s < 0:
            raise ValueError(f"warmup_s must be >= 0, got {self.warmup_s}")
        if self.in_flight % self.shards:
            raise ValueError(f"in_flight ({self.in_flight}) must divide by shards "
                             f"({self.shards})")

    @property
    def num_slots(self) -> int:
        """Trajectory slots this process runs: one shard's share."""
        return self.in_flight // self.shards

    def lengths(self, slot: int, gen: int) -> list[int]:
        """Response lengths of one trajectory's turns (lognormal, seeded by slot and
        generation)."""
        rng = np.random.default_rng([self.seed, slot, gen])
        raw = rng.lognormal(np.log(self.median_tokens), self.sigma, self.turns)
        return [int(x) for x in np.clip(np.rint(raw), 8, RESPONSE_LEN)]

    def prompt(self, slot: int, gen: int) -> list[int]:
        """The first prompt of a trajectory (shared by its group's slots)."""
        return _tokens(self.seed, (slot // self.group_size) * 7919 + gen, self.prompt_tokens)

    def user(self, slot: int, gen: int, turn: int) -> list[int]:
        """The tokens a trajectory adds after a turn (a tool result, a user message)."""
        return _tokens(self.seed + 1, (slot * 131 + gen) * 17 + turn, self.user_tokens)


@functools.cache
def _pool(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(10, LEN_BASE, 1 << 20)


def _tokens(seed: int, key: int, n: int) -> list[int]:
    """``n`` ordinary tokens (never MARK or EOS), a slice of a seeded pool chosen by ``key``."""
    pool = _pool(seed)
    at = (key * 2_654_435_761) % (len(pool) - n)
    return list(pool[at:at + n].tolist())


@dataclass(slots=True)
class Tally:
    """Turns that began after the warm-up and ended before the deadline."""

    t_warm: float
    t_end: float
    overhead_s: list[float] = field(default_factory=list)
    turn_s: list[float] = field(default_factory=list)
    calls: int = 0
    ended_in_window: int = 0
    wrong: int = 0

    def add(self, t0: float, t1: float, clock: TurnClock) -> None:
        if self.t_warm <= t1 <= self.t_end:
            self.ended_in_window += 1
        if t0 >= self.t_warm and t1 <= self.t_end:
            self.overhead_s.append(t1 - t0 - clock.server_s)
            self.turn_s.append(t1 - t0)
            self.calls += clock.calls


async def slot_loop(k: int, shape: Shape, route: Any, tally: Tally) -> None:
    """Trajectories of slot ``k`` until the deadline (a turn running then finishes)."""
    gen = 0
    while time.perf_counter() < tally.t_end:
        context, rid = shape.prompt(k, gen), f"traj-{k}-{gen}"
        for turn, want in enumerate(shape.lengths(k, gen)):
            if time.perf_counter() >= tally.t_end:
                return
            prompt = [*context, MARK, LEN_BASE + want]
            clock = TurnClock()
            token = CLOCK.set(clock)
            t0 = time.perf_counter()
            try:
                out = await route(rid, prompt)
            finally:
                CLOCK.reset(token)
            tally.add(t0, time.perf_counter(), clock)
            ids = list(out.token_ids)
            if ids != [FILLER] * (want - 1) + [EOS]:
                tally.wrong += 1
            context = prompt + ids + shape.user(k, gen, turn)
        gen += 1


def make_route(kind: str, router: Any, servers: dict[str, FakeServer]) -> Any:
    """One turn as verl's ``LLMServerClient.generate`` makes it, for router ``kind``."""
    ids = list(servers)
    sampling = {"temperature": 1.0, "top_p": 1.0, "logprobs": False}

    async def direct(rid: str, prompt: list[int]) -> Any:
        h = servers[ids[hash(rid) % len(ids)]]
        return await h.generate.remote(request_id="r", prompt_ids=prompt,
                                       sampling_params=dict(sampling))

    async def verl(rid: str, prompt: list[int]) -> Any:
        sid, h = router.acquire_server(rid)
        try:
            return await h.generate.remote(request_id="r", prompt_ids=prompt,
                                           sampling_params=dict(sampling))
        finally:
            router.release_server(sid)

    async def tailsieve(rid: str, prompt: list[int]) -> Any:
        sid, h = await router.acquire_server(rid)
        try:
            return await router.generate_turn(h.session, request_id="r", prompt_ids=prompt,
                                              sampling_params=dict(sampling))
        finally:
            await router.release_server(sid, rid)

    return {"direct": direct, "verl": verl, "tailsieve": tailsieve}[kind]


async def _window(tally: Tally, servers: dict[str, FakeServer]) -> tuple[float, float, float]:
    """CPU seconds, wall seconds and server-call seconds inside the measured window."""
    def busy() -> float:
        for s in servers.values():
            s._account(0)
        return sum(s.busy_integral for s in servers.values())

    await asyncio.sleep(max(tally.t_warm - time.perf_counter(), 0.0))
    cpu0, wall0, busy0 = time.process_time(), time.perf_counter(), busy()
    await asyncio.sleep(max(tally.t_end - time.perf_counter(), 0.0))
    return time.process_time() - cpu0, time.perf_counter() - wall0, busy() - busy0


async def run_one(kind: str, shape: Shape, yaml: dict[str, Any]) -> dict[str, Any]:
    """One router under the steady load of ``shape``; its row of results."""
    model = load_profile(shape.profile)
    token_output = token_output_class()
    servers = {f"10.0.{i // 250}.{i % 250}:8000": FakeServer(model, shape.time_scale,
                                                              token_output)
               for i in range(shape.servers)}
    router: Any = None
    impl = "none (the client picks the server by hash)"
    if kind == "verl":
        router, impl = verl_router(servers)
    elif kind == "tailsieve":
        from tailsieve.integrations.verl.router import VerlSessionRouter
        router = VerlSessionRouter(servers, yaml)
        impl = "tailsieve VerlSessionRouter"
    now = time.perf_counter()
    tally = Tally(now + shape.warmup_s, now + shape.warmup_s + shape.duration_s)
    route = make_route(kind, router, servers)
    window = asyncio.ensure_future(_window(tally, servers))
    await asyncio.gather(*(slot_loop(k, shape, route, tally) for k in range(shape.num_slots)))
    cpu, wall, busy = await window
    status = await router.get_status() if kind == "tailsieve" else None
    if kind == "tailsieve":
        await router.aclose()
    n = max(tally.ended_in_window, 1)
    ov = np.array(tally.overhead_s or [float("nan")]) * 1e3
    gw = (status or {}).get("gateway") or {}
    return {
        "router": kind, "implementation": impl, "turns_in_window": tally.ended_in_window,
        "turns_per_s": round(tally.ended_in_window / wall, 1), "wrong_turns": tally.wrong,
        "server_calls_per_turn": round(tally.calls / max(len(tally.turn_s), 1), 3),
        "window_s": round(wall, 3), "cpu_s": round(cpu, 3),
        "cpu_share_of_one_core": round(cpu / wall, 3),
        "cpu_per_turn_ms": round(cpu / n * 1e3, 4),
        "overhead_ms_p50": round(float(np.percentile(ov, 50)), 3),
        "overhead_ms_p99": round(float(np.percentile(ov, 99)), 3),
        "turn_s_p50": round(float(np.percentile(tally.turn_s or [0.0], 50)), 3),
        "mean_server_batch": round(busy / wall / shape.servers, 2),
        "gateway": {k: gw.get(k) for k in ("num_turns", "num_pieces", "moves_at_boundary",
                                           "moves_mid_turn", "rebalancer_checks",
                                           "moves_off_reason") if k in gw},
    }


def summarize(rows: list[dict[str, Any]], shape: Shape) -> dict[str, Any]:
    """Each router's own CPU per turn (its row minus ``direct``) and its actor's share of one
    core at GPU speed: own CPU per turn x the turn rate of ``in_flight`` turns on unhindered
    servers (mean length of the lognormal x tau at ``in_flight / servers`` per server), over
    ``shards`` for TailSieve's (each shard runs that share of the turns)."""
    model = load_profile(shape.profile)
    mean_tokens = shape.median_tokens * float(np.exp(shape.sigma ** 2 / 2))
    turn_gpu_s = mean_tokens * model.tau(shape.in_flight / shape.servers)
    rate = shape.in_flight / turn_gpu_s
    base = next((r["cpu_per_turn_ms"] for r in rows if r["router"] == "direct"), 0.0)
    out: dict[str, Any] = {"turns_per_s_at_gpu_speed": round(rate, 1),
                           "mean_turn_s_at_gpu_speed": round(turn_gpu_s, 3)}
    for r in rows:
        if r["router"] == "direct":
            continue
        own = max(r["cpu_per_turn_ms"] - base, 0.0)
        actors = shape.shards if r["router"] == "tailsieve" else 1
        out[r["router"]] = {"own_cpu_per_turn_ms": round(own, 4), "actors": actors,
                            "share_of_one_core_at_gpu_speed": round(own * 1e-3 * rate / actors,
                                                                    3)}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--servers", type=int, default=64)
    p.add_argument("--in-flight", type=int, default=4096)
    p.add_argument("--turns", type=int, default=3, help="turns per trajectory")
    p.add_argument("--median-tokens", type=float, default=512.0)
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="real seconds per model second (1: GPU speed)")
    p.add_argument("--warmup-s", type=float, default=15.0)
    p.add_argument("--duration-s", type=float, default=60.0, help="measured window, s")
    p.add_argument("--profile", default="qwen3-4b-h100")
    p.add_argument("--routers", default=",".join(ROUTERS))
    p.add_argument("--shards", type=int, default=1,
                   help="TailSieve router actors (YAML shards): run one, in_flight / shards")
    p.add_argument("--piece-tokens", type=int, default=None)
    p.add_argument("--no-moves", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    shape = Shape(servers=a.servers, in_flight=a.in_flight, turns=a.turns,
                  median_tokens=a.median_tokens, time_scale=a.time_scale,
                  warmup_s=a.warmup_s, duration_s=a.duration_s, profile=a.profile,
                  shards=a.shards, seed=a.seed)
    yaml: dict[str, Any] = {"eos_token_ids": [EOS], "profile": a.profile,
                            "moves": not a.no_moves, "piece_tokens": a.piece_tokens,
                            "max_sessions": max(10000, 2 * a.in_flight)}
    kinds = [k.strip() for k in a.routers.split(",") if k.strip()]
    bad = sorted(set(kinds) - set(ROUTERS))
    if bad:
        p.error(f"unknown router(s) {bad}; choose from {list(ROUTERS)}")
    rows = []
    for kind in kinds:
        random.seed(a.seed)
        rows.append(run_on_loop(run_one(kind, shape, yaml), "asyncio"))
        print(json.dumps(rows[-1]), flush=True)
    result = {
        "benchmark": "verl_router_scale",
        "command": command_line("benchmarks/bench_verl_router_scale.py",
                                sys.argv[1:] if argv is None else argv),
        "shape": {f: getattr(shape, f) for f in shape.__dataclass_fields__},
        "router_yaml": yaml, "verl_installed": verl_available(),
        "python": platform.python_version(), "rows": rows,
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "summary": summarize(rows, shape),
    }
    out = a.out or default_out("verl_router_scale.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"]))
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
