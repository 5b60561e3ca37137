"""Check by check: where a live step's balance checks and the simulator's part (pure).

``pair_checks`` aligns two traces' checks in time order (each pair costs the time between its
checks; a check left without a partner costs ``gap_s``; the cheapest alignment wins, so the
pairs keep their order within the step). When one side ran faster, ``b_scale`` (the live
step's length over the simulated one's) pairs checks by their place in the step instead. ``differences`` says
what two paired checks saw or decided differently:

- ``state``: the replicas' running counts, or a replica's context beyond ``context_rel``;
- ``candidate``: the moves planned (response, source, destination) differ;
- ``gain``: a move both planned, with predicted gains apart by more than ``gain_rel``;
- ``decision``: a move both planned, decided differently (made, deferred, skipped, refused);
- ``effect``: a move both made, taking effect on one side only.

``compare`` reports the first check where the two part (any kind, and the first whose moves
part), every parting pair, the checks with moves left without a partner, and beside them each
trace's summary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from tailsieve.core.balance_trace import BalanceTrace, CheckRecord, MoveRecord
from tailsieve.errors import ConfigError

__all__ = ["KINDS", "Parting", "compare", "differences", "pair_checks"]

KINDS = ("state", "candidate", "gain", "decision", "effect")
MOVE_KINDS = KINDS[1:]


@dataclass(frozen=True, slots=True)
class Parting:
    """A pair of checks (or a check without a partner) where the two sides differ."""

    live: int | None  # index of the live check (None: the simulator's has no partner)
    sim: int | None
    kinds: tuple[str, ...]  # of ``KINDS``, or ("unpaired",)

    def as_dict(self, live: BalanceTrace, sim: BalanceTrace) -> dict[str, Any]:
        a = live.checks[self.live] if self.live is not None else None
        b = sim.checks[self.sim] if self.sim is not None else None
        return {"live_check": self.live, "sim_check": self.sim, "kinds": list(self.kinds),
                "live": a.as_dict() if a is not None else None,
                "sim": b.as_dict() if b is not None else None}


def pair_checks(a: Sequence[CheckRecord], b: Sequence[CheckRecord], gap_s: float,
                b_scale: float = 1.0) -> list[tuple[int | None, int | None]]:
    """The cheapest order-keeping alignment of ``a``'s and ``b``'s checks: pairs ``(i, j)``,
    and ``(i, None)`` / ``(None, j)`` for checks left alone, in time order. A pair costs
    ``|t_a - b_scale * t_b|``, a check alone ``gap_s`` (so checks more than ``2 gap_s`` apart
    are never paired)."""
    if gap_s <= 0 or b_scale <= 0:
        raise ConfigError(f"gap_s and b_scale must be > 0, got {gap_s} and {b_scale}")
    tb = [b_scale * c.t_s for c in b]
    n, m = len(a), len(b)
    cost = [[0.0] * (m + 1) for _ in range(n + 1)]
    step = [[0] * (m + 1) for _ in range(n + 1)]  # 0: a pair, 1: a's check alone, 2: b's
    for i in range(n + 1):
        for j in range(m + 1):
            if i == j == 0:
                continue
            options = []
            if i and j:
                options.append((cost[i - 1][j - 1] + abs(a[i - 1].t_s - tb[j - 1]), 0))
            if i:
                options.append((cost[i - 1][j] + gap_s, 1))
            if j:
                options.append((cost[i][j - 1] + gap_s, 2))
            cost[i][j], step[i][j] = min(options)
    out: list[tuple[int | None, int | None]] = []
    i, j = n, m
    while i or j:
        kind = step[i][j]
        out.append((i - 1 if kind < 2 else None, j - 1 if kind != 1 else None))
        i, j = i - (kind < 2), j - (kind != 1)
    return _alone_in_time_order(out[::-1], a, tb)


def _alone_in_time_order(pairs: list[tuple[int | None, int | None]],
                         a: Sequence[CheckRecord], tb: Sequence[float],
                         ) -> list[tuple[int | None, int | None]]:
    """``pairs`` with each run of checks left alone between two pairs in time order."""
    def t(p: tuple[int | None, int | None]) -> float:
        return a[p[0]].t_s if p[0] is not None else tb[p[1]]  # type: ignore[index]

    out: list[tuple[int | None, int | None]] = []
    run: list[tuple[int | None, int | None]] = []
    for p in pairs:
        if p[0] is None or p[1] is None:
            run.append(p)
            continue
        out += sorted(run, key=t)
        run = []
        out.append(p)
    return out + sorted(run, key=t)


def differences(a: CheckRecord, b: CheckRecord, context_rel: float = 0.1,
                gain_rel: float = 0.25) -> tuple[str, ...]:
    """What two paired checks saw or decided differently (of ``KINDS``, in that order)."""
    kinds = []
    if a.replicas != b.replicas or a.num_running != b.num_running or any(
            abs(x - y) > context_rel * max(x, y, 1.0)
            for x, y in zip(a.context_tokens, b.context_tokens, strict=True)):
        kinds.append("state")
    ma = {m.candidate: m for m in a.moves}
    mb = {m.candidate: m for m in b.moves}
    if ma.keys() != mb.keys():
        kinds.append("candidate")
    both = [(ma[c], mb[c]) for c in ma if c in mb]
    if any(abs(x.gain_s - y.gain_s) > gain_rel * max(abs(x.gain_s), abs(y.gain_s))
           for x, y in both):
        kinds.append("gain")
    if any(x.decision != y.decision for x, y in both):
        kinds.append("decision")
    if any(x.made and y.made and (x.effective_s is None) != (y.effective_s is None)
           for x, y in both):
        kinds.append("effect")
    return tuple(kinds)


def compare(live: BalanceTrace, sim: BalanceTrace, gap_s: float | None = None,
            context_rel: float = 0.1, gain_rel: float = 0.25,
            sim_time_scale: float = 1.0) -> dict[str, Any]:
    """Where a live step's checks and the simulator's part (see the module docstring).
    ``gap_s``: the pairing's cost of a check left alone (default: half the median time
    between the simulator's checks); ``sim_time_scale``: the simulator's check times are
    scaled by it to pair (``pair_checks``'s ``b_scale``)."""
    gap = gap_s if gap_s is not None else _half_spacing(sim.checks or live.checks)
    pairs = pair_checks(live.checks, sim.checks, gap, sim_time_scale)
    partings: list[Parting] = []
    alone_quiet = 0
    for i, j in pairs:
        if i is None or j is None:
            check = live.checks[i] if i is not None else sim.checks[j]  # type: ignore[index]
            if check.moves:
                partings.append(Parting(i, j, ("unpaired",)))
            else:
                alone_quiet += 1
            continue
        kinds = differences(live.checks[i], sim.checks[j], context_rel, gain_rel)
        if kinds:
            partings.append(Parting(i, j, kinds))
    moving = [p for p in partings if p.kinds == ("unpaired",)
              or any(k in MOVE_KINDS for k in p.kinds)]
    counts = {k: sum(1 for p in partings if k in p.kinds) for k in (*KINDS, "unpaired")}
    a, b = live.summary(), sim.summary()
    return {
        "gap_s": round(gap, 4), "sim_time_scale": round(sim_time_scale, 4), "num_pairs": sum(1 for i, j in pairs if i is not None
                                                 and j is not None),
        "alone_without_moves": alone_quiet, "partings_by_kind": counts,
        "first_parting": partings[0].as_dict(live, sim) if partings else None,
        "first_move_parting": moving[0].as_dict(live, sim) if moving else None,
        "partings": [{"live_check": p.live, "sim_check": p.sim, "kinds": list(p.kinds),
                      "t_s": _times(live, sim, p)} for p in partings],
        "moves": {"live": _by_decision(live.moves), "sim": _by_decision(sim.moves)},
        "live": a, "sim": b,
        "effective_ratio": round(a["effective"] / b["effective"], 3) if b["effective"]
        else None,
    }


def _half_spacing(checks: Sequence[CheckRecord]) -> float:
    gaps = sorted(y.t_s - x.t_s for x, y in pairwise(checks))
    return max(gaps[len(gaps) // 2] / 2.0, 1e-6) if gaps else 1.0


def _times(live: BalanceTrace, sim: BalanceTrace, p: Parting) -> list[float | None]:
    return [round(live.checks[p.live].t_s, 4) if p.live is not None else None,
            round(sim.checks[p.sim].t_s, 4) if p.sim is not None else None]


def _by_decision(moves: Sequence[MoveRecord]) -> dict[str, int]:
    out = {"planned": len(moves)}
    for m in moves:
        out[m.decision] = out.get(m.decision, 0) + 1
    out["effective"] = sum(1 for m in moves if m.effective_s is not None)
    return out
