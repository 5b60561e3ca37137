"""Timed pieces as observations of a replica's decode curve, from the router's own bookkeeping.

The router knows, for every generation request it sent: the replica, when it was sent and
when its answer came back (or when it was cancelled), its prompt tokens and how many tokens
each of its sequences generated. In continuous batching every running sequence of a replica
gains one token per decode step, so a request that generated ``g`` tokens in ``t`` seconds
took part in ``g`` steps, and over its window the replica ran the batch its co-running
requests make up. ``DecodeLedger`` keeps those records per replica and turns each finished
request into a ``PieceObservation``: its tokens, its wall time and the replica's batch and
context over that window, split into stretches where they are constant.

What the router does not see is filled in as follows (the fitter's errors come from here):

- a sequence of a finished request generates at a constant rate over its lifetime, and a
  sequence of an ``n > 1`` request that generated ``L_i`` of the request's ``L_max`` tokens
  ended at ``start + (end - start) * L_i / L_max``;
- a co-running request whose tokens are unknown (still running, cancelled or failed before
  its answer) generated at the observed request's own rate (the replica's step rate);
- every request in flight is running (all admitted: no ``max_num_seqs`` queue) unless a cap
  is given, in which case the batch is capped there.

Pure: the caller passes the times (seconds on its own monotonic clock).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tailsieve.errors import ProfileError
from tailsieve.model.throughput import ThroughputModel

FloatArray = npt.NDArray[np.float64]
MIN_TOKENS = 2  # a request with fewer generated tokens observes no decode step worth fitting


@dataclass(frozen=True, slots=True)
class PieceObservation:
    """One request (a piece of a response, or a whole one) and the replica over its window."""

    tokens: int  # decode steps it took part in: the most tokens one of its sequences made
    duration_s: float  # seconds from sending it to its answer
    durations_s: tuple[float, ...]  # the window split into stretches of constant batch
    batch: tuple[float, ...]  # running sequences on the replica in each stretch (>= 1)
    context_tokens: tuple[float, ...]  # context tokens they held, mean over each stretch
    prompt_tokens: int = 0  # the request's own prompt (a continuation: its whole prefix)
    replica: str = ""  # the replica it ran on (informational)

    def __post_init__(self) -> None:
        if isinstance(self.tokens, bool) or not isinstance(self.tokens, int) or self.tokens < 1:
            raise ProfileError(f"observation: tokens must be a positive integer, got "
                               f"{self.tokens!r}")
        if not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise ProfileError(f"observation: duration_s must be a positive number of seconds, "
                               f"got {self.duration_s!r}")
        n = len(self.durations_s)
        if n == 0 or len(self.batch) != n or len(self.context_tokens) != n:
            raise ProfileError("observation: durations_s, batch and context_tokens must be "
                               f"non-empty and of one length, got {n}, {len(self.batch)}, "
                               f"{len(self.context_tokens)}")
        d = np.asarray(self.durations_s, dtype=np.float64)
        b = np.asarray(self.batch, dtype=np.float64)
        c = np.asarray(self.context_tokens, dtype=np.float64)
        if not (np.all(np.isfinite(d)) and np.all(d >= 0)):
            raise ProfileError("observation: stretch durations must be finite and >= 0")
        if not (np.all(np.isfinite(b)) and np.all(b >= 1)):
            raise ProfileError("observation: batch must be >= 1 in every stretch (the observed "
                               "request itself runs)")
        if not (np.all(np.isfinite(c)) and np.all(c >= 0)):
            raise ProfileError("observation: context tokens must be finite and >= 0")
        if abs(float(d.sum()) - self.duration_s) > 1e-6 * self.duration_s + 1e-9:
            raise ProfileError(f"observation: stretches last {float(d.sum())!r} s, the "
                               f"request {self.duration_s!r} s")
        if self.prompt_tokens < 0:
            raise ProfileError(f"observation: prompt_tokens must be >= 0, got "
                               f"{self.prompt_tokens}")


@dataclass(frozen=True, slots=True)
class PrefillObservation:
    """Time to the first token of a request (streamed, or one that asked for one token)."""

    prompt_tokens: int  # tokens prefilled (the prompt, or a continuation's whole prefix)
    ttft_s: float  # seconds from sending it to its first token

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1:
            raise ProfileError(f"prefill observation: prompt_tokens must be >= 1, got "
                               f"{self.prompt_tokens}")
        if not (math.isfinite(self.ttft_s) and self.ttft_s > 0):
            raise ProfileError(f"prefill observation: ttft_s must be a positive number, got "
                               f"{self.ttft_s!r}")


@dataclass(slots=True)
class _Record:
    start_s: float
    prompt_tokens: int
    num_seqs: int
    max_tokens: int | None  # the request's cap (a bound for unknown progress)
    end_s: float | None = None
    tokens: tuple[int, ...] | None = None  # per sequence, when known
    complete: bool = False  # answered normally (tokens exact)
    harvested: bool = False


@dataclass(slots=True)
class DecodeLedger:
    """Generation requests by replica, turned into observations once they finish."""

    max_num_seqs: int | None = None  # the engines' running cap (None: all admitted)
    max_records: int = 20_000  # per replica; the oldest are dropped beyond it
    _replicas: dict[str, list[_Record]] = field(default_factory=dict)
    _by_id: dict[int, tuple[str, _Record]] = field(default_factory=dict)
    _next_id: int = 0

    def start(self, replica: str, t_s: float, prompt_tokens: int, num_seqs: int = 1,
              max_tokens: int | None = None) -> int:
        """A request was sent to ``replica`` at ``t_s``; returns its id for ``end``."""
        if num_seqs < 1:
            raise ProfileError(f"ledger: num_seqs must be >= 1, got {num_seqs}")
        rec = _Record(float(t_s), max(int(prompt_tokens), 0), int(num_seqs), max_tokens)
        rid = self._next_id
        self._next_id += 1
        recs = self._replicas.setdefault(replica, [])
        recs.append(rec)
        if len(recs) > self.max_records:
            del recs[: len(recs) - self.max_records]
        self._by_id[rid] = (replica, rec)
        return rid

    def replica_of(self, request_id: int) -> str | None:
        """The replica request ``request_id`` was sent to, while it runs (None after ``end``)."""
        got = self._by_id.get(request_id)
        return None if got is None else got[0]

    def end(self, request_id: int, t_s: float, tokens: Sequence[int] | None,
            complete: bool, prompt_tokens: int | None = None) -> None:
        """Request ``request_id`` ended at ``t_s``: answered (``complete``, ``tokens`` per
        sequence exact) or cancelled / failed (``tokens`` as far as known, else None)."""
        got = self._by_id.pop(request_id, None)
        if got is None:
            return
        rec = got[1]
        rec.end_s = max(float(t_s), rec.start_s)
        rec.tokens = None if tokens is None else tuple(max(int(x), 0) for x in tokens)
        rec.complete = bool(complete) and rec.tokens is not None and len(rec.tokens) > 0
        if prompt_tokens is not None and prompt_tokens > 0:
            rec.prompt_tokens = int(prompt_tokens)

    def harvest(self, model: ThroughputModel | None = None,
                max_per_replica: int | None = None) -> list[PieceObservation]:
        """Observations of the requests answered since the last harvest (at most
        ``max_per_replica`` per replica, evenly spread; the rest are skipped), and records no
        later request can overlap are forgotten. ``model`` (the current estimate of the decode
        curve) times the replicas' step clocks, which places the tokens of co-running
        sequences in time (``_Timeline``); without one they are spread evenly in time."""
        out: list[PieceObservation] = []
        for replica, recs in self._replicas.items():
            todo = [r for r in recs if r.complete and not r.harvested]
            for r in todo:
                r.harvested = True
            if max_per_replica is not None and len(todo) > max_per_replica:
                pick = np.linspace(0, len(todo) - 1, max_per_replica).round().astype(int)
                todo = [todo[i] for i in sorted(set(pick.tolist()))]
            todo = [r for r in todo if r.tokens is not None and max(r.tokens) >= MIN_TOKENS
                    and r.end_s is not None and r.end_s > r.start_s]
            if todo:
                horizon = max(r.start_s if r.end_s is None else r.end_s for r in recs)
                line = _Timeline.of(recs, self.max_num_seqs, horizon, model)
                out.extend(line.observe(r, replica) for r in todo)
            self._prune(recs)
        return out

    def _prune(self, recs: list[_Record]) -> None:
        open_starts = [r.start_s for r in recs if r.end_s is None or
                       (r.complete and not r.harvested)]
        keep_after = min(open_starts) if open_starts else math.inf
        recs[:] = [r for r in recs if r.end_s is None or r.end_s > keep_after or
                   (r.complete and not r.harvested)]

    @property
    def num_in_flight(self) -> int:
        return len(self._by_id)

    @property
    def num_replicas(self) -> int:
        """Replicas with records."""
        return len(self._replicas)


@dataclass(frozen=True, slots=True)
class _Timeline:
    """One replica's records as stretches between consecutive request events: the running
    sequences and the context they hold in each, and a step clock ``S`` (decode steps made
    since the first event) from ``model`` (without one: one step per second, the shape only).

    A sequence whose tokens are known generated them in proportion to the clock over its
    lifetime (``L * (S(t) - S(start)) / (S(end) - S(start))``); one whose tokens are unknown
    (running, or cancelled before its answer) gained one token per step (without a model: at
    the median rate of the sequences that finished)."""

    cuts: FloatArray  # event times, increasing
    batch: FloatArray  # running sequences in each stretch (capped)
    context: FloatArray  # context tokens they hold at the stretch's middle (on the clock)

    @classmethod
    def of(cls, recs: Sequence[_Record], cap_seqs: int | None, horizon_s: float,
           model: ThroughputModel | None, rounds: int = 3) -> _Timeline:
        start, end, prompt, tokens = [], [], [], []
        for r in recs:
            for i in range(r.num_seqs):
                toks = r.tokens[i] if r.tokens is not None and i < len(r.tokens) else None
                stop = horizon_s if r.end_s is None else r.end_s
                longest = max(r.tokens) if r.tokens else 0
                if r.complete and r.end_s is not None and toks is not None and toks < longest:
                    stop = r.start_s + (r.end_s - r.start_s) * toks / longest
                start.append(r.start_s)
                end.append(max(stop, r.start_s))
                prompt.append(r.prompt_tokens)
                tokens.append(math.nan if toks is None else toks)
        st, en = np.asarray(start), np.asarray(end)
        toks_a, prm = np.asarray(tokens, dtype=np.float64), np.asarray(prompt, dtype=np.float64)
        cuts = np.unique(np.concatenate((st, en)))
        i0, i1 = np.searchsorted(cuts, st), np.searchsorted(cuts, en)
        num = len(cuts) - 1
        d = np.diff(cuts)
        running = _sweep(i0, i1, np.ones_like(st), num)
        batch = np.maximum(running if cap_seqs is None else np.minimum(running, cap_seqs), 1.0)
        share = np.ones(num) if cap_seqs is None else np.minimum(1.0, cap_seqs / np.maximum(
            running, 1.0))
        base = _sweep(i0, i1, prm, num)
        known = ~np.isnan(toks_a)
        clock = np.concatenate(([0.0], np.cumsum(d)))  # without a model: seconds
        unknown_rate = 1.0
        if model is None:  # tokens per second of the sequences that finished
            lived = en - st
            ok = known & (lived > 0)
            unknown_rate = float(np.median(toks_a[ok] / lived[ok])) if ok.any() else 0.0
        context = base
        for _ in range(rounds if model is not None else 1):
            mid = clock[:-1] + np.diff(clock) / 2
            span = clock[i1] - clock[i0]
            alpha = np.where(known, np.nan_to_num(toks_a) / np.where(span > 0, span, np.inf),
                             unknown_rate)
            gained = mid * _sweep(i0, i1, alpha, num) - _sweep(i0, i1, alpha * clock[i0], num)
            context = (base + np.maximum(gained, 0.0)) * share
            if model is None:
                break
            step = model.tau_array(batch) + model.context_s_per_token * context
            clock = np.concatenate(([0.0], np.cumsum(d / np.maximum(step, 1e-12))))
        return cls(cuts, batch, context)

    def observe(self, r: _Record, replica: str) -> PieceObservation:
        """The stretches of ``r``'s window (from its sending to its answer)."""
        assert r.tokens is not None and r.end_s is not None
        a = int(np.searchsorted(self.cuts, r.start_s))
        b = int(np.searchsorted(self.cuts, r.end_s))
        d = np.diff(self.cuts[a:b + 1])
        total = r.end_s - r.start_s
        d = d * (total / d.sum())
        return PieceObservation(max(r.tokens), total, tuple(d.tolist()),
                                tuple(np.maximum(self.batch[a:b], 1.0).tolist()),
                                tuple(self.context[a:b].tolist()), r.prompt_tokens, replica)


def _sweep(i0: npt.NDArray[np.intp], i1: npt.NDArray[np.intp], value: FloatArray,
           num: int) -> FloatArray:
    """Per stretch, the sum of ``value`` over the sequences running in it (stretches
    ``i0 .. i1 - 1``)."""
    acc = np.zeros(num + 1)
    np.add.at(acc, i0, value)
    np.add.at(acc, i1, -value)
    return np.cumsum(acc)[:num]
