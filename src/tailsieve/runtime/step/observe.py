"""Observability of the live runtime: per-step metrics, a JSON log line, Prometheus gauges on
the router (own registry, no global state), and a rich progress display."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import IO

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from rich.console import Console
from rich.live import Live
from rich.table import Table

from tailsieve.core.outcome import WasteSplit
from tailsieve.runtime.execution.observe_moves import MovesCollector
from tailsieve.runtime.step.step_state import StepProgress


@dataclass(frozen=True, slots=True)
class StepMetrics:
    """Summary of one live step (also one line of ``steps.jsonl``)."""

    step: int
    policy: str
    num_groups: int  # delivered
    q: int
    m: int
    makespan_s: float
    tail_time_s: float
    bulk_cut_s: float
    wall_s: float  # measured around the whole step, incl. planning
    num_launched: int
    num_aborted: int
    num_regenerated: int
    generated_tokens: int
    wasted_tokens: int
    delivered_tokens: int
    num_carried_next: int  # candidates carried into the next step
    num_healthy_replicas: int
    is_flush: bool
    num_planned_replicas: int = 0  # replicas the step was planned for (healthy at its start)
    num_readmitted: int = 0  # replicas re-admitted by a health probe so far (cumulative)
    estimated_wasted_tokens: int = 0  # part of wasted_tokens estimated (runtime.step.waste)
    num_moves: int = 0  # responses moved by the live rebalancer in this step
    moved_tokens: int = 0  # prefix tokens those moves carried (prompt + generated)
    prefill_tokens: int = 0  # of them, predicted uncached on the destination
    prefill_s: float = 0.0  # the cost model's prefill seconds for those tokens
    num_relocated: int = 0  # responses continued (or restarted) elsewhere after a fault
    moves: bool = False  # whether the step could move responses (moves on, a balanced step)
    # wasted_tokens split three ways (core.outcome.WasteSplit), each with its bound:
    cutoff_wasted_tokens: int = 0  # tokens of groups aborted at the cutoff (exact + estimated)
    cutoff_estimated_tokens: int = 0  # of them, estimated (unfinished unstreamed responses)
    cutoff_max_tokens: int = 0  # the most cutoff_wasted_tokens can be (estimates at their caps)
    lost_exact_tokens: int = 0  # decoded again after a fault or move, counted exactly (streamed)
    lost_estimated_tokens: int = 0  # decoded again after a fault or move, estimated (unstreamed)
    lost_estimated_max_tokens: int = 0  # the most lost_estimated_tokens can be (pieces' caps)
    num_lost_pieces: int = 0  # continuation pieces lost mid-way (to a fault or a move)
    num_rebalancer_errors: int = 0  # live rebalancer crashes (moves were off after it)
    rebalancer_error: str | None = None  # the crash's exception, when there was one
    moves_off_reason: str = ""  # why responses cannot move in this rollout ("" when they can)
    profile: str = ""  # the controller's throughput model in this step (its name)
    profile_fitted: bool = False  # profile "auto": the online fit was in use (not the fallback)

    def logged(self) -> dict[str, float]:
        """The step's figures a trainer logs (verl's ``meta_info["timing"]``, slime's rollout
        metrics), as floats under ``tailsieve/``."""
        names = ("makespan_s", "tail_time_s", "bulk_cut_s", "q", "m", "num_aborted",
                 "num_carried_next", "wasted_tokens", "num_moves", "num_relocated",
                 "cutoff_wasted_tokens", "lost_exact_tokens", "lost_estimated_tokens",
                 "num_rebalancer_errors")
        out = {f"tailsieve/{n}": float(getattr(self, n)) for n in names}
        out["tailsieve/moves_active"] = 0.0 if self.moves_off_reason else 1.0
        out["tailsieve/profile_fitted"] = float(self.profile_fitted)
        return out

    def to_json(self) -> str:
        return json.dumps({"event": "tailsieve.step", **asdict(self)}, sort_keys=True)


def waste_fields(split: WasteSplit | None) -> dict[str, int]:
    """``StepMetrics``' waste fields from a step's ``WasteSplit`` (none when not split)."""
    if split is None:
        return {}
    return {
        "cutoff_wasted_tokens": split.cutoff_tokens,
        "cutoff_estimated_tokens": split.cutoff_estimated_tokens,
        "cutoff_max_tokens": split.cutoff_max_tokens,
        "lost_exact_tokens": split.lost_exact_tokens,
        "lost_estimated_tokens": split.lost_estimated_tokens,
        "lost_estimated_max_tokens": split.lost_estimated_max_tokens,
        "num_lost_pieces": split.num_lost_pieces,
    }


class RuntimeMetrics:
    """Prometheus metrics of the router. ``serve(port)`` exposes them on 127.0.0.1:port/metrics
    from the running event loop; ``aclose`` stops the server."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.makespan = Gauge("tailsieve_step_makespan_seconds", "Last step makespan", registry=r)
        self.tail_time = Gauge(
            "tailsieve_tail_time_seconds", "Last step tail pool time", registry=r
        )
        self.bulk_cut = Gauge("tailsieve_bulk_cut_seconds", "Last step bulk cutoff", registry=r)
        self.q = Gauge("tailsieve_q", "Tail groups of the last step", registry=r)
        self.m = Gauge("tailsieve_m", "Tail replicas of the last step", registry=r)
        self.steps = Counter("tailsieve_steps", "Steps run", registry=r)
        self.aborted_tokens = Counter(
            "tailsieve_aborted_tokens", "Tokens discarded by aborts and faults", registry=r
        )
        self.generated_tokens = Counter(
            "tailsieve_generated_tokens", "All generated tokens", registry=r
        )
        self.regenerated = Counter(
            "tailsieve_regenerated_groups",
            "Groups sent as one request with n, restarted whole after a replica fault", registry=r
        )
        self.cutoff_tokens = Counter(
            "tailsieve_cutoff_tokens", "Tokens of groups aborted at the cutoff", registry=r
        )
        self.lost_exact_tokens = Counter(
            "tailsieve_lost_exact_tokens",
            "Tokens decoded again after a fault or move, counted exactly", registry=r,
        )
        self.lost_estimated_tokens = Counter(
            "tailsieve_lost_estimated_tokens",
            "Tokens decoded again after a fault or move, estimated (unstreamed)", registry=r,
        )
        self.rebalancer_errors = Counter(
            "tailsieve_rebalancer_errors",
            "Crashes of the live rebalancer (moves off for the rest of that step)", registry=r,
        )
        self.healthy = Gauge(
            "tailsieve_replica_healthy", "1 when the replica is in service", ["replica"], registry=r
        )
        self.moves = MovesCollector()  # observe_moves' two families
        r.register(self.moves)
        self.profile_fitted = Gauge(
            "tailsieve_profile_fitted", "1 when the auto profile's online fit is in use",
            registry=r,
        )
        self.profile_observations = Gauge(
            "tailsieve_profile_observations", "Timed pieces the auto profile fitted", registry=r
        )
        self.profile_error = Gauge(
            "tailsieve_profile_relative_error",
            "Root-mean-square relative error of the auto profile on its pieces", registry=r,
        )
        self._runner: web.AppRunner | None = None

    def record(self, m: StepMetrics, healthy: tuple[bool, ...]) -> None:
        self.makespan.set(m.makespan_s)
        self.tail_time.set(m.tail_time_s)
        self.bulk_cut.set(m.bulk_cut_s)
        self.q.set(m.q)
        self.m.set(m.m)
        self.steps.inc()
        self.aborted_tokens.inc(m.wasted_tokens)
        self.generated_tokens.inc(m.generated_tokens)
        self.regenerated.inc(m.num_regenerated)
        self.cutoff_tokens.inc(m.cutoff_wasted_tokens)
        self.lost_exact_tokens.inc(m.lost_exact_tokens)
        self.lost_estimated_tokens.inc(m.lost_estimated_tokens)
        self.rebalancer_errors.inc(m.num_rebalancer_errors)
        for i, h in enumerate(healthy):
            self.healthy.labels(replica=str(i)).set(1.0 if h else 0.0)

    def record_moves(self, off_reason: str | None) -> None:
        """Whether moves run, and why not (``RolloutConfig.moves_off_reason``)."""
        self.moves.off_reason = off_reason

    def record_profile(self, fitted: bool, num_observations: int, rel_error: float) -> None:
        """The ``auto`` profile's state after a step."""
        self.profile_fitted.set(1.0 if fitted else 0.0)
        self.profile_observations.set(num_observations)
        self.profile_error.set(rel_error)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def serve(self, port: int, host: str = "127.0.0.1") -> None:
        async def handle(_: web.Request) -> web.Response:
            return web.Response(body=self.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

        app = web.Application()
        app.router.add_get("/metrics", handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


class StepLog:
    """One JSON line per step to a text stream (stderr or an open file)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, m: StepMetrics) -> None:
        self._stream.write(m.to_json() + "\n")
        self._stream.flush()


class ProgressDisplay:
    """A live table per step: groups done per pool, cutoff, q, m, replica health."""

    def __init__(self, console: Console | None = None) -> None:
        self._console = console or Console(stderr=True)
        self._live: Live | None = None

    def __enter__(self) -> ProgressDisplay:
        self._live = Live(Table(), console=self._console, refresh_per_second=8, transient=False)
        self._live.__enter__()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._live is not None:
            self._live.__exit__(et, e, tb)
            self._live = None

    def update(self, p: StepProgress) -> None:
        if self._live is None:
            return
        t = Table(title=f"step {p.step}  q={p.q}  m={p.m}  t={p.elapsed_s:.1f}s")
        for col in ("pool", "done", "needed", "note"):
            t.add_column(col)
        t.add_row("tail", str(p.num_tail_done), str(p.num_tail), "")
        cut = f"cut at {p.cut_s:.2f}s" if p.cut_s is not None else "racing"
        t.add_row("bulk", str(p.num_bulk_done), str(p.num_bulk_needed), cut)
        t.add_row("aborted", str(p.num_aborted), "", "")
        health = "".join("+" if h else "x" for h in p.healthy)
        t.add_row("replicas", health, "", "+ healthy, x out")
        self._live.update(t)
