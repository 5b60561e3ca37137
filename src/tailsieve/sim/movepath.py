"""Event-driven step simulation with moves by continuation (the balancer at work).

Like ``sim.eventpath`` (one ``ReplicaEngine`` per replica, time from event to event), plus
re-balance checks: every ``BalanceSettings.interval_s`` (and at a completion when half an
interval has passed since the last check) every replica is advanced to the moment, the pure
balancer (``core.balancer.plan_moves``, in decisions of a few moves: ``core.balance_check``)
is asked for moves, and each move is applied:

- the response stops on its replica ``A`` with ``g`` tokens generated there (a *piece*);
- after the seam (``seam_s``: round trip + one scheduling iteration) it continues on ``B`` as a
  new piece whose prompt is its prompt plus every token generated so far, asking for the
  remaining tokens; ``B`` prefills the uncached part of that prefix at the recompute rate
  (``ReplicaEngine.submit(..., cached_tokens=, continuation=True)``).

Bounded pieces (``PieceSettings``, what the live runtime does to know where a response
stands): a response runs as pieces of at most ``piece_tokens``; at each piece end it leaves its
replica for ``seam_s`` (the round trip) and continues there with its prefix cached. A move then
either waits for the running piece to end (``defer_moves``: nothing is lost, the move takes
effect up to one piece later) or happens at once and keeps only the tokens up to the last piece
end (the running piece is decoded again, unless ``keeps_running_piece``: streaming); a move
that drops a piece is skipped when its predicted gain does not cover the piece's age, as the
live rebalancer does.

Prefix cache: a replica keeps the prefix of every response that left it (a response continued
where it ran before only prefills what it generated since), and the prompt of every group it
was dealt (spread siblings share it). Eviction is not modelled.

A delivered response is the chain of its pieces: contiguous token ranges that add up to its
length. Exactly-once and whole groups are kept as in ``eventpath``: the cutoff aborts unchosen
fresh groups wherever their pieces are (running, waiting or in transit).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from tailsieve.core.balance_check import plan_check
from tailsieve.core.balance_drafts import reprice_gain
from tailsieve.core.balance_trace import BalanceTrace
from tailsieve.core.balancer import BalanceSettings, Move, ReplicaLoad, Running
from tailsieve.errors import ConfigError
from tailsieve.model.replica_engine import Completion, ReplicaConfig, ReplicaEngine
from tailsieve.sim.layout import RequestLayout, SimResult, choose_fresh

Piece = tuple[int, int, int]  # (replica, first token index, end token index) of one piece


@dataclass(frozen=True, slots=True)
class PieceSettings:
    """How the live runtime runs a continued response: pieces of bounded length."""

    piece_tokens: int  # max tokens per piece
    seam_s: float = 0.0  # a piece end on the same replica: the response waits this long (round
    # trip); its continuation is charged like any (prefill_s + uncached prefix)
    keeps_running_piece: bool = False  # a move keeps the running piece's tokens (streaming)
    defer_moves: bool = True  # a move waits for the running piece's end, as the live runtime
    # does on vLLM (False: it cuts the piece, whose tokens are decoded again)
    stream_interval: int = 1  # with keeps_running_piece: tokens per streamed chunk (vLLM's
    # stream_interval); a move keeps the tokens streamed, the first at once and then every
    # ``stream_interval``, and the rest of the running piece is decoded again

    def __post_init__(self) -> None:
        if self.piece_tokens < 1:
            raise ConfigError(f"piece_tokens must be >= 1, got {self.piece_tokens}")
        if self.seam_s < 0:
            raise ConfigError(f"piece seam_s must be >= 0, got {self.seam_s}")
        if self.stream_interval < 1:
            raise ConfigError(f"stream_interval must be >= 1, got {self.stream_interval}")

    @classmethod
    def streamed(cls, stream_interval: int = 1) -> PieceSettings:
        """One piece per response until it moves, streamed in chunks of ``stream_interval``
        tokens (a move keeps what was streamed)."""
        return cls(piece_tokens=2**62, keeps_running_piece=True, defer_moves=False,
                   stream_interval=stream_interval)

    def kept_on_move(self, generated: int) -> int:
        """Tokens of a running piece a move keeps, of ``generated``: all of them without
        pieces' loss (streaming, SGLang's abort), else the streamed chunks."""
        k = self.stream_interval
        if k <= 1 or generated <= 1:
            return generated
        return 1 + (generated - 1) // k * k


@dataclass(slots=True)
class MoveStats:
    """What moving cost in one step."""

    num_moves: int = 0
    moved_tokens: int = 0  # prefix tokens carried by continuations (prompt + generated)
    prefill_tokens: int = 0  # of them, not in the destination's prefix cache
    prefill_s: float = 0.0  # destination stall for those prefills, seconds
    num_checks: int = 0  # re-balance checks made
    dropped_tokens: int = 0  # tokens of running pieces a move dropped (decoded again)
    pieces: list[list[Piece]] = field(default_factory=list)  # per request: its chain


def replica_loads(
    engines: Sequence[ReplicaEngine],
    models: Sequence[tuple[Callable[[int], float], float, float, float, int]],
) -> list[ReplicaLoad]:
    """What a re-balance check reads: one ``ReplicaLoad`` per replica (a replica with
    queued requests accepts no move); ``models``: per replica, what does not change during a
    step (``cost_models``)."""
    return [ReplicaLoad(r, e.num_running, e.kv_tokens(), e.running_contexts, tau, k, per_token,
                        prefill_s, e.num_waiting == 0, pool)
            for r, (e, (tau, k, per_token, prefill_s, pool)) in enumerate(
                zip(engines, models, strict=True))]


def cost_models(
    configs: Sequence[ReplicaConfig], taus: Sequence[Callable[[int], float]],
    per_token: Sequence[float], tails: frozenset[int],
) -> list[tuple[Callable[[int], float], float, float, float, int]]:
    """Per replica: its ``tau``, context rate, recompute rate per token, fixed prefill cost
    per continuation and pool (``tails`` form pool 1)."""
    return [(taus[r], cfg.throughput.context_s_per_token, per_token[r], cfg.prefill_s,
             int(r in tails)) for r, cfg in enumerate(configs)]


def simulate_with_moves(
    layout: RequestLayout,
    configs: Sequence[ReplicaConfig],
    k: int,
    balance: BalanceSettings,
    keep_pieces: bool = False,
    tail_replicas: Sequence[int] = (),
    pieces: PieceSettings | None = None,
    trace: BalanceTrace | None = None,
    draft_factor: Callable[[int, int, int], float] | None = None,
) -> tuple[SimResult, MoveStats]:
    """Simulate one plan with re-balancing; ``k`` fresh groups are delivered. Moves stay
    within a pool (``tail_replicas`` form the tail pool); ``keep_pieces`` records every
    response's chain of pieces in the returned stats; ``pieces``: bounded pieces (None: a
    response runs in one piece until it is moved); ``trace``: each check's inputs and decision
    are recorded there (``core.balance_trace``), as the live rebalancer records its own.
    ``draft_factor(request, src, dst)``: how
    many times as many verify steps per token the response takes on ``dst`` (the sibling
    drafts it loses, ``core.balance_drafts``); a move whose gain, repriced with it at the
    check's loads, is not positive is skipped (None: drafts not priced)."""
    n = layout.group_size
    lens, ptoks = layout.lengths, layout.prompt_tokens
    nreq = int(lens.size)
    num_rep = len(configs)
    engines = [ReplicaEngine(c) for c in configs]
    tails = frozenset(tail_replicas)
    per_token = [c.recompute_cost_s(1) - c.prefill_s for c in configs]  # recompute rate
    taus: dict[int, Callable[[int], float]] = {}
    for c in configs:
        if id(c.throughput) not in taus:
            arr = c.throughput.taus(nreq + 2).tolist()
            taus[id(c.throughput)] = arr.__getitem__
    rep_taus = [taus[id(c.throughput)] for c in configs]
    models = cost_models(configs, rep_taus, per_token, tails)
    piece_no = [0] * nreq
    done_prev = [0] * nreq  # tokens of the request's finished pieces
    cur = layout.request_replica.tolist()  # replica of the current piece (-1: in transit)
    cache: list[dict[int, int]] = [{} for _ in range(num_rep)]  # replica -> request -> tokens
    group_reps: list[tuple[int, ...]] = [()] * layout.num_groups
    for g in range(layout.num_groups):
        group_reps[g] = tuple(sorted(set(layout.request_replica[g * n:(g + 1) * n].tolist())))
    stats = MoveStats(pieces=[[] for _ in range(nreq)] if keep_pieces else [])
    piece_start = [0] * nreq
    started_s = [0.0] * nreq  # when the running piece of each request began
    cap = pieces.piece_tokens if pieces is not None else None
    defer = pieces is not None and pieces.defer_moves and not pieces.keeps_running_piece
    drops = pieces is not None and not pieces.keeps_running_piece and not defer
    redirect: dict[int, int] = {}  # deferred moves: request -> destination at its piece end
    transit: dict[int, int] = {}  # between pieces (a seam): request -> its next piece's replica

    def piece_len(i: int) -> int:
        left_i = int(lens[i]) - done_prev[i]
        return left_i if cap is None else min(left_i, cap)

    for r, idx in enumerate(layout.replica_requests):
        for i in idx.tolist():
            engines[r].submit((i, 0), piece_len(i), int(ptoks[i]))
    done = np.full(nreq, np.inf)
    left = np.full(layout.num_groups, n, dtype=np.int64)
    group_done = np.full(layout.num_groups, np.inf)
    aborted = np.zeros(nreq, dtype=bool)
    pending: list[tuple[float, int, int, int, bool]] = []  # (time, seq, request, dst, moved)
    seq = 0
    fresh_done = 0
    finished = [0]  # responses completed (a check follows a completion, as live)

    def end_piece(i: int, r: int, upto: int) -> None:
        if keep_pieces and not (drops and upto == piece_start[i]):  # a dropped piece: nothing
            stats.pieces[i].append((r, piece_start[i], upto))
        piece_start[i] = upto

    def record(comps: list[Completion]) -> None:
        nonlocal fresh_done, seq
        for c in comps:
            i = c.request_id[0]  # type: ignore[index]
            r = cur[i]
            end_piece(i, r, done_prev[i] + c.num_tokens)
            done_prev[i] += c.num_tokens
            d = redirect.pop(i, r)
            if done_prev[i] < int(lens[i]):  # a bounded piece ended: continue after the seam
                assert pieces is not None
                cache[r][i] = int(ptoks[i]) + done_prev[i]
                got = cached_on((i, 0))
                got[r] = max(got.get(r, 0), cache[r][i])
                piece_no[i] += 1
                cur[i] = -1
                wait = balance.seam_s if d != r else pieces.seam_s
                heapq.heappush(pending, (c.time_s + wait, seq, i, d, d != r))
                transit[i] = d
                seq += 1
                continue
            done[i] = c.time_s
            finished[0] += 1
            g = i // n
            left[g] -= 1
            if left[g] == 0:
                group_done[g] = c.time_s
                fresh_done += int(layout.fresh[g])

    def advance_all(t: float) -> None:
        for e in engines:
            if e.now_s < t:
                record(e.advance(t))

    def cached(rid: object, r: int) -> int:
        i = rid[0]  # type: ignore[index]
        p = int(ptoks[i]) if r in group_reps[i // n] else 0
        return max(p, cache[r].get(i, 0))

    hits: dict[int, dict[int, int]] = {}  # request -> replica -> cached prefix tokens

    def cached_on(rid: object) -> dict[int, int]:
        i = rid[0]  # type: ignore[index]
        got = hits.get(i)
        if got is None:
            p = int(ptoks[i])
            got = hits[i] = {r: p for r in group_reps[i // n]} if p else {}
        return got

    def rebalance(t: float) -> None:
        stats.num_checks += 1
        loads = replica_loads(engines, models)
        if redirect:
            # a response bound elsewhere by a deferred move counts where it is going (as the
            # live executor sees it) and is not a candidate again
            for i, d in redirect.items():
                r = cur[i]
                if r < 0 or r == d:
                    continue
                x = int(ptoks[i]) + done_prev[i] + engines[r].tokens_so_far((i, piece_no[i]))
                loads[r].num_running -= 1
                loads[r].context_tokens -= x
                loads[d].num_running += 1
                loads[d].context_tokens += x
            for ld in loads:
                ld.running = _without(ld.running, redirect)
        if transit:
            # between two pieces (a seam) a response counts on the replica of its next piece,
            # its context what it generated so far, as the live executor sees it; it is not
            # a candidate (its next piece is already on its way)
            for i, d in transit.items():
                if aborted[i]:
                    continue
                loads[d].num_running += 1
                loads[d].context_tokens += int(ptoks[i]) + done_prev[i]
        # the check's decisions (at most max_moves_per_decision moves each), made once all are
        # planned: the simulated instant does not advance between them
        moves = [mv for decision in plan_check(
            loads, balance.horizon_at(t), balance.seam_s, balance.max_moves_per_check,
            balance.max_moves_per_decision, cached, cached_on) for mv in decision]
        if trace is not None:
            trace.record(t, loads, balance.horizon_at(t), balance.seam_s, moves, len(moves))
        nonlocal seq
        horizon = balance.horizon_at(t)
        for mv in moves:
            rid = mv.key
            i = rid[0]  # type: ignore[index]
            if draft_factor is not None and _repriced(
                    mv, loads, horizon, draft_factor(i, mv.src, mv.dst)) <= 0:
                continue  # the drafts it loses outweigh the balance it gains
            if defer:
                redirect[i] = mv.dst  # moves when its running piece ends
                continue
            if drops and mv.predicted_gain_s <= t - started_s[i]:
                continue  # the gain does not cover decoding the running piece again
            g = engines[mv.src].tokens_so_far(rid)
            engines[mv.src].abort(rid)
            if drops:
                stats.dropped_tokens += g
                g = 0
            elif pieces is not None:
                kept = pieces.kept_on_move(g)
                stats.dropped_tokens += g - kept
                g = kept
            end_piece(i, mv.src, done_prev[i] + g)
            done_prev[i] += g
            cache[mv.src][i] = int(ptoks[i]) + done_prev[i]
            got = cached_on(rid)
            got[mv.src] = max(got.get(mv.src, 0), cache[mv.src][i])
            piece_no[i] += 1
            cur[i] = -1
            heapq.heappush(pending, (t + balance.seam_s, seq, i, mv.dst, True))
            transit[i] = mv.dst
            seq += 1

    def submit_pending(t: float) -> None:
        while pending and pending[0][0] <= t:
            _, _, i, d, moved = heapq.heappop(pending)
            transit.pop(i, None)
            if aborted[i]:
                continue
            e = engines[d]
            if e.now_s < t:
                record(e.advance(t))
            prefix = int(ptoks[i]) + done_prev[i]
            p = int(ptoks[i]) if d in group_reps[i // n] else 0
            cached = min(prefix, max(p, cache[d].get(i, 0)))
            cfg = configs[d]
            if moved:
                if trace is not None:
                    trace.took_effect()
                stats.num_moves += 1
                stats.moved_tokens += prefix
                stats.prefill_tokens += prefix - cached
                stats.prefill_s += cfg.recompute_cost_s(prefix - cached)
            cur[i] = d
            started_s[i] = t
            e.submit((i, piece_no[i]), piece_len(i), prefix, cached_tokens=cached,
                     continuation=True)

    def cut(t: float) -> tuple[np.ndarray, float]:
        advance_all(t)
        chosen, cutoff = choose_fresh(group_done, layout, k)
        for g in np.flatnonzero(layout.fresh & ~chosen):
            for i in range(g * n, (g + 1) * n):
                if np.isfinite(done[i]):
                    continue
                aborted[i] = True
                r = cur[i]
                if r >= 0:
                    rid = (i, piece_no[i])
                    so_far = engines[r].tokens_so_far(rid)
                    engines[r].abort(rid)
                    end_piece(i, r, done_prev[i] + so_far)
                    done_prev[i] += so_far
                    cur[i] = -1
        return chosen, cutoff

    chosen: np.ndarray | None = None
    cutoff = 0.0
    if k == 0:
        chosen, cutoff = cut(0.0)
    t_check = balance.interval_s
    last_check = 0.0
    half = balance.interval_s / 2.0
    while True:
        t_eng, r_eng = math.inf, -1
        for r, e in enumerate(engines):
            te = e.next_event_s()
            if te < t_eng:
                t_eng, r_eng = te, r
        t_pend = pending[0][0] if pending else math.inf
        if math.isinf(t_eng) and math.isinf(t_pend):
            break
        if t_pend <= t_eng and t_pend <= t_check:
            t = t_pend
            submit_pending(t)
        elif t_check < t_eng:
            t = t_check
            advance_all(t)
            if chosen is None and fresh_done >= k:
                chosen, cutoff = cut(t)
            rebalance(t)
            last_check = t
            t_check += balance.interval_s
        else:
            t = t_eng
            ndone = finished[0]
            record(engines[r_eng].pop_next())
            if chosen is None and fresh_done >= k:
                chosen, cutoff = cut(t)
            if finished[0] > ndone and t - last_check >= half:
                advance_all(t)
                rebalance(t)
                last_check = t
                t_check = t + balance.interval_s
            continue
        if chosen is None and fresh_done >= k:
            chosen, cutoff = cut(t)
    if chosen is None:
        chosen, cutoff = choose_fresh(group_done, layout, k)
    so_far = np.zeros(nreq, dtype=np.int64)
    so_far[aborted] = np.asarray(done_prev, dtype=np.int64)[aborted]
    done[aborted] = np.inf
    res = SimResult(
        done_s=done, tokens_so_far=so_far, delivered_fresh=chosen, cutoff_s=cutoff,
        num_preemptions=sum(e.num_preemptions for e in engines),
        recomputed_tokens=sum(e.recomputed_tokens for e in engines),
        replica_preemptions=tuple(e.num_preemptions for e in engines),
    )
    return res, stats



def _repriced(mv: Move, loads: Sequence[ReplicaLoad], horizon_s: float, rho: float) -> float:
    """``mv``'s predicted gain with the moved response's progress on the destination scaled
    by ``rho`` (``core.balance_drafts.reprice_gain``), at the loads the check started from."""
    if rho == 1.0:
        return mv.predicted_gain_s
    src, dst, x = loads[mv.src], loads[mv.dst], mv.prefix_tokens
    c_top = src.cost_s(src.num_running, src.context_tokens)
    a = src.cost_s(src.num_running - 1, src.context_tokens - x)
    b = dst.cost_s(dst.num_running + 1, dst.context_tokens + x)
    return reprice_gain(mv.predicted_gain_s, horizon_s, c_top, a, b, rho)


def _without(running: Callable[[], Running],
             redirect: dict[int, int]) -> Callable[[], Running]:
    """``running`` less the requests a deferred move has already bound elsewhere."""
    return lambda: [(k, c) for k, c in running() if k[0] not in redirect]  # type: ignore[index]
