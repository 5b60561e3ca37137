"""``plan_moves`` equals the greedy balancer as first written (kept here as the reference).

The reference re-finds the costliest replica, scans every destination and evaluates three
candidates per destination on every move; the shipped one prunes destinations by a bound and
updates only the two replicas a move changes. Both must return the same moves.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Hashable, Iterator, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.core.balancer import Move, ReplicaLoad, plan_moves


def reference_plan_moves(
    loads: Sequence[ReplicaLoad], horizon_s: float, seam_s: float, max_moves: int = 64,
    cached: Callable[[Hashable, int], int] | None = None,
) -> list[Move]:
    """``plan_moves`` as first written: every move scans every destination."""
    nr = len(loads)
    if max_moves <= 0 or nr < 2 or horizon_s <= 0:
        return []
    b = [ld.num_running for ld in loads]
    ctx = [float(ld.context_tokens) for ld in loads]
    room = [ld.room_tokens for ld in loads]
    cost = [ld.cost_s(b[i], ctx[i]) for i, ld in enumerate(loads)]
    sorted_ctx: dict[int, list[tuple[int, int, Hashable]]] = {}  # replica -> (ctx, seq, key)
    out: list[Move] = []
    while len(out) < max_moves:
        top = max(range(nr), key=cost.__getitem__)
        c_top = cost[top]
        if b[top] < 1 or c_top <= 0:
            break
        lt = loads[top]
        k_top = lt.context_s_per_token
        a = lt.cost_s(b[top] - 1, ctx[top]) if b[top] > 1 else None  # top without x, + k x
        dests = []
        for d, ld in enumerate(loads):
            if d == top or not ld.accepts or ld.pool != lt.pool:
                continue
            base = ld.tau(b[d] + 1) + ld.context_s_per_token * ctx[d]
            if base >= c_top:
                continue
            # the best new top cost any x could reach, with nothing to prefill
            k_d = ld.context_s_per_token
            if a is None:
                ideal = base
            elif k_top + k_d > 0:
                ideal = max(base, (a * k_d + base * k_top) / (k_top + k_d))
            else:
                ideal = max(a, base)
            if horizon_s * (c_top - ideal) / c_top - seam_s - ld.prefill_s > 0:
                dests.append((d, base))
        if not dests:
            break
        if top not in sorted_ctx:
            sorted_ctx[top] = sorted((c, i, key) for i, (key, c) in enumerate(lt.running()))
        cands = sorted_ctx[top]
        if not cands:
            break
        best: tuple[float, int, int, int] | None = None  # (net gain, index, dst, uncached)
        for d, base in dests:
            ld = loads[d]
            k_d = ld.context_s_per_token
            fit = sum(1 for c in cands if c[0] <= room[d])  # the responses that fit its room
            if a is None or k_top + k_d <= 0:
                star = fit
            else:
                x_star = (a - base) / (k_top + k_d)
                star = min(bisect.bisect_left(cands, (x_star,)), fit)
            for j in {0, star - 1, min(star, fit - 1)}:
                if j < 0 or j >= fit:
                    continue
                x = cands[j][0]
                c_src = a - k_top * x if a is not None else 0.0
                new = max(c_src, base + k_d * x)
                if new >= c_top:
                    continue
                hit = min(cached(cands[j][2], ld.replica), x) if cached is not None else 0
                uncached = x - hit
                net = horizon_s * (c_top - new) / c_top - (
                    ld.prefill_s + ld.prefill_s_per_token * uncached + seam_s)
                if net > 0 and (best is None or net > best[0]):
                    best = (net, j, d, uncached)
        if best is None:
            break
        net, j, d, uncached = best
        x, _, key = cands.pop(j)
        b[top] -= 1
        ctx[top] -= x
        b[d] += 1
        ctx[d] += x
        room[top] += x
        room[d] -= x
        cost[top] = lt.cost_s(b[top], ctx[top])
        cost[d] = loads[d].cost_s(b[d], ctx[d])
        out.append(Move(key, lt.replica, loads[d].replica, x, uncached, net))
    return out


def _same(got: list[Move], want: list[Move]) -> None:
    assert [(m.key, m.src, m.dst, m.prefix_tokens, m.prefill_tokens) for m in got] == [
        (m.key, m.src, m.dst, m.prefix_tokens, m.prefill_tokens) for m in want]
    for g, w in zip(got, want, strict=True):
        assert g.predicted_gain_s == pytest.approx(w.predicted_gain_s, rel=1e-9, abs=1e-12)


def _tau_of(t0: float, slope: float, bend: float) -> Callable[[int], float]:
    return lambda b: t0 + slope * b + bend * b ** 0.5 if b > 0 else 0.0


MODEL = st.tuples(
    st.sampled_from([0.004, 0.01, 0.02]), st.sampled_from([0.0, 1e-5, 2e-4]),
    st.sampled_from([0.0, 1e-3]), st.sampled_from([0.0, 1e-8, 1e-7, 4e-7]),
    st.sampled_from([0.0, 1e-6, 1e-5, 1e-4]), st.sampled_from([0.0, 0.01, 0.2]))
CONTEXT = st.one_of(st.sampled_from([0, 100, 500, 2000, 8000]), st.integers(0, 16_000))
REPLICA = st.tuples(
    st.integers(0, 2),  # cost model
    st.lists(CONTEXT, max_size=12),  # running contexts
    st.integers(0, 2),  # responses counted but not candidates
    st.booleans(),  # accepts (drawn False one time in four below)
    st.sampled_from([0, 0, 0, 1]),  # pool
    st.integers(0, 3),  # copies of this replica (exact ties across destinations)
    st.sampled_from([math.inf, math.inf, 0.0, 600.0, 5000.0, 20_000.0]),  # room for moves
)


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[ReplicaLoad], float, float, int, dict[
        tuple[Hashable, int], int] | None]:
    models = draw(st.lists(MODEL, min_size=3, max_size=3))
    taus = {i: _tau_of(*m[:3]) for i, m in enumerate(models)}
    loads: list[ReplicaLoad] = []
    for mi, contexts, hidden, acc, pool, copies, room in draw(st.lists(REPLICA, min_size=1,
                                                                         max_size=8)):
        accepts = acc or draw(st.booleans()) or draw(st.booleans())
        for _ in range(1 + copies):
            r = len(loads)
            items = tuple(((r, j), c) for j, c in enumerate(contexts))
            extra = hidden * 3000
            _, _, _, k, per_token, prefill_s = models[mi]
            loads.append(ReplicaLoad(
                r, len(items) + hidden, float(sum(c for _, c in items) + extra),
                (lambda it=items: it), taus[mi], k, per_token, prefill_s,
                accepts=accepts, pool=pool, room_tokens=room))
    hits = None
    if draw(st.booleans()):
        keys = [(key, ld.replica) for ld in loads for key, _ in ld.running()]
        hits = {kr: draw(st.sampled_from([0, 50, 1000, 20_000])) for kr in keys
                if draw(st.integers(0, 3)) == 0}
    horizon = draw(st.sampled_from([0.0, 0.5, 5.0, 50.0, 200.0]))
    seam = draw(st.sampled_from([0.0, 0.05, 0.3]))
    return loads, horizon, seam, draw(st.integers(0, 70)), hits


Case = tuple[list[ReplicaLoad], float, float, int, dict[tuple[Hashable, int], int] | None]


@settings(max_examples=400, deadline=None)
@given(cases(), st.sampled_from(["none", "exact", "with zeros"]))
def test_equals_the_reference_on_random_loads(case: Case, where: str) -> None:
    """Random loads: cost models, pools, non-accepting replicas, identical replicas,
    responses counted but not offered, cache hits (told where, or not), move limits, room
    for moves (none, some, unbounded)."""
    loads, horizon, seam, max_moves, hits = case
    cached = None if hits is None else (lambda key, r: hits.get((key, r), 0))
    on: dict[Hashable, dict[int, int]] = {}
    for (key, r), n in (hits or {}).items():
        on.setdefault(key, {})[r] = n
    cached_on = {"none": None, "exact": lambda key: on.get(key, {}),
                 "with zeros": lambda key: {r: on.get(key, {}).get(r, 0)
                                            for r in range(len(loads) + 1)}}[where]
    _same(plan_moves(loads, horizon, seam, max_moves, cached, cached_on),
          reference_plan_moves(loads, horizon, seam, max_moves, cached))


def test_no_accepting_replica_makes_no_move() -> None:
    tau = _tau_of(0.004, 1e-5, 0.0)
    loads = [ReplicaLoad.of(r, [((r, 0), 100 * r + 100)] * (r + 1), tau, 1e-7, 1e-5,
                            accepts=False) for r in range(3)]
    assert plan_moves(loads, 100.0, 0.0) == reference_plan_moves(loads, 100.0, 0.0) == []


def _synthetic(seed: int, num_replicas: int = 64, per_replica: int = 64,
               copies: bool = False) -> list[ReplicaLoad]:
    """The benchmark's worst case: random skew, 0-16k contexts, every check moves a lot."""
    import numpy as np

    rng = np.random.default_rng(seed)
    taus = [0.0] + [0.005 + 2e-5 * b for b in range(1, num_replicas * per_replica + 2)]
    loads = []
    for r in range(num_replicas):
        b = int(rng.integers(per_replica // 2, per_replica + 1))
        ctx = (rng.integers(0, 16_000, b) * rng.uniform(0.5, 1.0)).astype(int).tolist()
        if copies and r % 2:
            ctx = [c for _, c in loads[-1].running()]
        items = [((r, j), c) for j, c in enumerate(ctx)]
        loads.append(ReplicaLoad.of(r, items, taus.__getitem__, 1.5e-7, 2e-5))
    return loads


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("copies", [False, True])
def test_equals_the_reference_at_64_replicas(seed: int, copies: bool) -> None:
    loads = _synthetic(seed, copies=copies)
    want = reference_plan_moves(loads, 200.0, 0.05)
    assert len(want) == 64  # the many-moves case
    _same(plan_moves(loads, 200.0, 0.05), want)
    hits = {(key, r): 4000 for ld in loads for key, _ in ld.running()
            for r in range(len(loads)) if (key[1] + r) % 9 == 0}
    cached = lambda key, r: hits.get((key, r), 0)  # noqa: E731
    on: dict[Hashable, dict[int, int]] = {}
    for (key, r), n in hits.items():
        on.setdefault(key, {})[r] = n
    _same(plan_moves(loads, 200.0, 0.05, 64, cached, lambda key: on.get(key, {})),
          reference_plan_moves(loads, 200.0, 0.05, 64, cached))
    _same(plan_moves(loads, 200.0, 0.05, 64, cached),
          reference_plan_moves(loads, 200.0, 0.05, 64, cached))


def test_equals_the_reference_inside_a_simulated_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every check of a simulated run (cache hits from dealt prompts and earlier pieces),
    planned in decisions of a few moves as the simulator does."""
    from tailsieve.core.balance_check import plan_check
    from tailsieve.model.profiles import load_profile
    from tailsieve.model.replica_engine import ReplicaConfig
    from tailsieve.model.speculative import SpecConfig
    from tailsieve.sim import movepath
    from tailsieve.sim.driver import SimSettings, epoch_prompt_ids, run_policies
    from tailsieve.sim.replicas import PoolConfigs
    from tailsieve.sim.workloads import resolve_workload

    checks = []

    def both(loads: Sequence[ReplicaLoad], horizon_s: float, seam_s: float, max_moves: int,
             per: int, cached: Callable[[Hashable, int], int],
             cached_on: object) -> Iterator[list[Move]]:
        want = reference_plan_moves(loads, horizon_s, seam_s, max_moves, cached)
        got = [mv for d in plan_check(loads, horizon_s, seam_s, max_moves, per, cached,
                                      cached_on) for mv in d]  # type: ignore[arg-type]
        _same(got, want)
        checks.append(len(got))
        yield got

    monkeypatch.setattr(movepath, "plan_check", both)
    spec = SpecConfig.parse("none")
    pools = PoolConfigs.from_specs(
        ReplicaConfig.from_profile(load_profile("qwen3-4b-h100")), spec, spec)
    wl = resolve_workload("paper-math", seed=1)
    ds = wl.prompt_ids()
    settings = SimSettings(num_replicas=8, num_groups=32, group_size=8, num_steps=4, seed=1)
    run_policies(["tailsieve"], settings, lambda: epoch_prompt_ids(ds, 1), wl, pools)
    assert len(checks) > 10 and sum(checks) > 10  # checks that moved responses
