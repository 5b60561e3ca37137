"""Where every response of one simulated step with moves stands (``sim.movepath``).

A response runs as a chain of pieces. Between two pieces it is on no replica (``cur`` is -1)
and in ``transit`` to the replica of its next piece; a deferred move binds it to another
replica at its running piece's end (``redirect``). A replica keeps the prefix of every response
that left it, and the prompt of every group it was dealt; ``hits`` tells the planner where and
how much of a response is cached.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import numpy as np

from tailsieve.core.balance_drafts import reprice_gain
from tailsieve.core.balancer import Move, ReplicaLoad, Running
from tailsieve.model.replica_engine import ReplicaConfig, ReplicaEngine
from tailsieve.sim.layout import RequestLayout
from tailsieve.sim.pieces import Piece

__all__ = ["CostModel", "StepResponses", "cost_models", "replica_loads", "repriced"]

CostModel = tuple[Callable[[int], float], float, float, float, int]  # see ``cost_models``


class StepResponses:
    """The step's responses by request index (``layout``'s order): progress, place, caches."""

    __slots__ = ("_drops", "_n", "aborted", "cache", "chains", "cur", "done_prev", "group_reps",
                 "hits", "layout", "lengths", "piece_cap", "piece_no", "piece_start",
                 "prompt_tokens", "redirect", "started_s", "transit")

    def __init__(self, layout: RequestLayout, num_replicas: int, piece_cap: int | None,
                 keep_pieces: bool, drops: bool) -> None:
        n = self._n = layout.group_size
        nreq = int(layout.lengths.size)
        self.layout = layout
        self.lengths: list[int] = layout.lengths.tolist()
        self.prompt_tokens: list[int] = layout.prompt_tokens.tolist()
        self.piece_cap = piece_cap  # most tokens of one piece (None: unbounded)
        self._drops = drops  # a move drops its running piece (nothing of it is kept)
        self.piece_no = [0] * nreq  # number of the running (or next) piece
        self.done_prev = [0] * nreq  # tokens of the request's finished pieces
        self.cur: list[int] = layout.request_replica.tolist()  # replica of the running piece
        self.piece_start = [0] * nreq  # first token of the running piece
        self.started_s = [0.0] * nreq  # when the running piece began
        self.cache: list[dict[int, int]] = [{} for _ in range(num_replicas)]  # replica ->
        # request -> prefix tokens it left there
        self.group_reps = [tuple(sorted(set(layout.request_replica[g * n:(g + 1) * n].tolist())))
                           for g in range(layout.num_groups)]  # replicas each group was dealt
        self.hits: dict[int, dict[int, int]] = {}  # request -> replica -> cached prefix tokens
        self.redirect: dict[int, int] = {}  # deferred moves: request -> replica at piece end
        self.transit: dict[int, int] = {}  # between pieces: request -> next piece's replica
        self.aborted = np.zeros(nreq, dtype=bool)  # cut with its unchosen group
        self.chains: list[list[Piece]] = [[] for _ in range(nreq)] if keep_pieces else []

    def response(self, i: int) -> tuple[str, int]:
        """(prompt id, sample) of request ``i``: the key the live runtime knows it by."""
        return self.layout.groups[i // self._n].prompt_id, i % self._n

    def piece_len(self, i: int) -> int:
        """Tokens request ``i``'s next piece asks for."""
        left = self.lengths[i] - self.done_prev[i]
        cap = self.piece_cap
        return left if cap is None else min(left, cap)

    def prefix(self, i: int) -> int:
        """Prompt plus the tokens of the finished pieces: what a continuation carries."""
        return self.prompt_tokens[i] + self.done_prev[i]

    def ran(self, i: int, replica: int, tokens: int) -> None:
        """Request ``i``'s running piece on ``replica`` stopped after ``tokens`` tokens."""
        upto = self.done_prev[i] + tokens
        if self.chains and not (self._drops and upto == self.piece_start[i]):
            self.chains[i].append((replica, self.piece_start[i], upto))  # (a dropped piece:
            # nothing)
        self.piece_start[i] = upto
        self.done_prev[i] = upto

    def left(self, i: int, replica: int) -> None:
        """Request ``i`` left ``replica`` between two pieces: its prefix stays cached there."""
        self.cache[replica][i] = self.prefix(i)
        got = self.cached_on((i, 0))
        got[replica] = max(got.get(replica, 0), self.cache[replica][i])
        self.piece_no[i] += 1
        self.cur[i] = -1

    def cached(self, rid: Hashable, replica: int) -> int:
        """Prefix tokens of request ``rid[0]`` cached on ``replica``."""
        i = rid[0]  # type: ignore[index]
        p = self.prompt_tokens[i] if replica in self.group_reps[i // self._n] else 0
        return max(p, self.cache[replica].get(i, 0))

    def cached_on(self, rid: Hashable) -> dict[int, int]:
        """Replica -> prefix tokens of request ``rid[0]`` cached there (where above 0)."""
        i = rid[0]  # type: ignore[index]
        got = self.hits.get(i)
        if got is None:
            p = self.prompt_tokens[i]
            got = self.hits[i] = {r: p for r in self.group_reps[i // self._n]} if p else {}
        return got

    def cached_prefix(self, i: int, replica: int) -> int:
        """Of request ``i``'s prefix, the tokens ``replica`` holds."""
        p = self.prompt_tokens[i] if replica in self.group_reps[i // self._n] else 0
        return min(self.prefix(i), max(p, self.cache[replica].get(i, 0)))

    def seen(self, loads: list[ReplicaLoad], engines: Sequence[ReplicaEngine],
             ) -> list[ReplicaLoad]:
        """``loads`` (read from ``engines``) as the live executor sees them: a response bound
        elsewhere by a deferred move counts where it is going; one between two pieces (a seam)
        counts on its next piece's replica with what it generated so far. Neither is a
        candidate (its next piece is already on its way)."""
        if self.redirect:
            for i, d in self.redirect.items():
                r = self.cur[i]
                if r < 0 or r == d:
                    continue
                x = self.prefix(i) + engines[r].tokens_so_far((i, self.piece_no[i]))
                loads[r].num_running -= 1
                loads[r].context_tokens -= x
                loads[d].num_running += 1
                loads[d].context_tokens += x
            for ld in loads:
                ld.running = self._without_bound(ld.running)
        for i, d in self.transit.items():
            if not self.aborted[i]:
                loads[d].num_running += 1
                loads[d].context_tokens += self.prefix(i)
        return loads

    def _without_bound(self, running: Callable[[], Running]) -> Callable[[], Running]:
        """``running`` less the requests a deferred move has already bound elsewhere."""
        redirect = self.redirect
        return lambda: [(k, c) for k, c in running()
                        if k[0] not in redirect]  # type: ignore[index]


def cost_models(configs: Sequence[ReplicaConfig], tails: frozenset[int], max_batch: int,
                ) -> list[CostModel]:
    """Per replica: its ``tau`` (a lookup in a table up to ``max_batch``, shared by the
    replicas of one curve), context rate, recompute rate per token, fixed prefill cost per
    continuation and pool (``tails`` form pool 1)."""
    tables: dict[int, Callable[[int], float]] = {}
    for c in configs:
        if id(c.throughput) not in tables:
            tables[id(c.throughput)] = c.throughput.taus(max_batch).tolist().__getitem__
    return [(tables[id(cfg.throughput)], cfg.throughput.context_s_per_token,
             cfg.recompute_cost_s(1) - cfg.prefill_s, cfg.prefill_s, int(r in tails))
            for r, cfg in enumerate(configs)]


def replica_loads(engines: Sequence[ReplicaEngine], models: Sequence[CostModel],
                  ) -> list[ReplicaLoad]:
    """What a re-balance check reads: one ``ReplicaLoad`` per replica (a replica with
    queued requests accepts no move); ``models``: per replica, what does not change during a
    step (``cost_models``)."""
    return [ReplicaLoad(r, e.num_running, e.kv_tokens(), e.running_contexts, tau, k, per_token,
                        prefill_s, e.num_waiting == 0, pool)
            for r, (e, (tau, k, per_token, prefill_s, pool)) in enumerate(
                zip(engines, models, strict=True))]


def repriced(mv: Move, loads: Sequence[ReplicaLoad], horizon_s: float, rho: float) -> float:
    """``mv``'s predicted gain with the moved response's progress on the destination scaled
    by ``rho`` (``core.balance_drafts.reprice_gain``), at the loads the check started from."""
    if rho == 1.0:
        return mv.predicted_gain_s
    src, dst, x = loads[mv.src], loads[mv.dst], mv.prefix_tokens
    c_top = src.cost_s(src.num_running, src.context_tokens)
    a = src.cost_s(src.num_running - 1, src.context_tokens - x)
    b = dst.cost_s(dst.num_running + 1, dst.context_tokens + x)
    return reprice_gain(mv.predicted_gain_s, horizon_s, c_top, a, b, rho)
