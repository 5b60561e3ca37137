"""Event-driven model of one continuous-batching replica.

All running requests advance together: one decode step emits one token per running request
and lasts ``tau(b)`` seconds at ``b`` running requests. The engine therefore tracks a single
*progress* counter ``P`` (tokens emitted per running slot since the engine started); a request
admitted at progress ``P0`` with ``L`` tokens finishes when ``P`` reaches ``P0 + L``. Between
events ``b`` is constant, so time advances in closed form from one completion to the next
(never token by token).

Also modelled: a cap on running requests (``max_num_seqs``; the rest wait FCFS), a prefill
stall when a request is admitted, aborts, and the throughput model's context-length term (a
step costs ``tau(b) + k * C`` with ``C`` the running requests' prompt plus generated tokens;
``C`` grows by ``b`` per step, so time is a quadratic in progress, still solved in closed
form).

KV capacity (``kv_capacity_tokens``), like vLLM V1 with recompute preemption: a decode step
needs one KV slot per running request for its new token, so the running set must satisfy
``C + b <= capacity``. ``C`` is linear in progress (``C = S0 + b * P``), so the first whole
step at which it would not hold is ``P* = floor((capacity - S0) / b)`` on the integer progress
grid, an exact event (its time follows from the quadratic above). There the newest running
request is preempted: its KV is freed and it goes back to the front of the waiting queue,
keeping the tokens it generated. When it is admitted again, its prompt plus generated tokens
are recomputed as a prefill (``ReplicaConfig.recompute_cost_s`` for that many tokens) and it
continues where it stopped. A waiting request is admitted only if, with it, the next step still fits.
The engine counts preemptions and recomputed tokens.

Scheduling policy (``priority=True``: vLLM V1's ``--scheduling-policy priority``): every request
carries an integer ``priority`` (lower runs earlier) and its arrival order. The waiting queue
is ordered by ``(priority, arrival)`` (a preempted request keeps its arrival, so it goes back
to its place, not to the front), admission stops at the first request that does not fit, and
the request preempted for KV space is the running one of largest ``(priority, arrival)``
(vLLM's ``max(self.running, key=lambda r: (r.priority, r.arrival_time))``). Without it (FCFS,
vLLM's default) the newest running request is preempted and goes back to the queue's front.

The engine is pure (no clock, no I/O): callers drive it with ``submit`` / ``abort`` at
``now_s`` and ``advance`` / ``pop_next``.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field

from tailsieve.errors import TraceError
from tailsieve.model.replica_config import ReplicaConfig

__all__ = ["Completion", "ReplicaConfig", "ReplicaEngine"]


@dataclass(frozen=True, slots=True)
class Completion:
    """A request that finished decoding."""

    request_id: Hashable
    time_s: float  # when its last token was emitted
    num_tokens: int  # tokens generated


@dataclass(slots=True)
class _Req:
    request_id: Hashable
    num_tokens: int
    prompt_tokens: int
    prefill_tokens: int  # prompt tokens to prefill at first admission (uncached ones)
    continuation: bool  # the prompt carries a moved response's prefix (recompute rate)
    start_p: float = math.nan  # progress at (re)admission minus tokens already generated
    done_tokens: float = 0.0  # tokens generated before a preemption (kept while waiting)
    priority: int = 0  # lower runs earlier (priority policy only)
    arrival: int = 0  # submission order on this engine (kept across preemptions)


@dataclass(slots=True)
class _WaitQueue:
    """The waiting requests: FCFS (a deque; a preempted request goes to the front) or, under
    the priority policy, a heap by ``(priority, arrival)``."""

    priority: bool
    _fifo: deque[_Req] = field(default_factory=deque)
    _heap: list[tuple[int, int, _Req]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self._heap) if self.priority else bool(self._fifo)

    def __iter__(self) -> Iterator[_Req]:
        return (r for _, _, r in sorted(self._heap, key=lambda e: e[:2])) if self.priority \
            else iter(self._fifo)

    def append(self, req: _Req) -> None:
        if self.priority:
            heapq.heappush(self._heap, (req.priority, req.arrival, req))
        else:
            self._fifo.append(req)

    def appendleft(self, req: _Req) -> None:
        """A preempted request re-enters: at the front (FCFS), at its place (priority)."""
        if self.priority:
            self.append(req)
        else:
            self._fifo.appendleft(req)

    def head(self) -> _Req:
        return self._heap[0][2] if self.priority else self._fifo[0]

    def popleft(self) -> _Req:
        return heapq.heappop(self._heap)[2] if self.priority else self._fifo.popleft()

    def remove(self, req: _Req) -> None:
        if self.priority:
            self._heap = [e for e in self._heap if e[2] is not req]
            heapq.heapify(self._heap)
        else:
            self._fifo.remove(req)


class ReplicaEngine:
    """One replica's continuous batching, advanced event by event."""

    def __init__(self, config: ReplicaConfig, priority: bool = False) -> None:
        """``priority``: vLLM's priority scheduling policy (see the module docstring);
        default FCFS."""
        self.config = config
        self.priority = priority
        self.now_s = 0.0
        self._p = 0.0
        self._stall_until_s = 0.0
        self._heap: list[tuple[float, int, Hashable]] = []
        self._seq = 0
        self._running: dict[Hashable, _Req] = {}
        self._waiting = _WaitQueue(priority)
        self._arrivals = 0
        self._waiting_ids: dict[Hashable, _Req] = {}
        self._taus: list[float] = [0.0]  # tau(b) by index b, grown on demand
        self._next_s: float | None = None  # cached next_event_s (None: state changed)
        self._k = config.throughput.context_s_per_token
        self._sum_prompt = 0.0  # prompt tokens of the running requests
        self._sum_start_p = 0.0  # admission progress of the running requests
        self._cap = config.kv_capacity_tokens
        self.busy_s = 0.0  # seconds with at least one running request
        self.num_preemptions = 0  # running requests preempted for lack of KV capacity
        self.recomputed_tokens = 0  # prompt + generated tokens prefilled again after preemption

    # ----- queries -------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting_ids)

    def has_work(self) -> bool:
        return bool(self._running) or bool(self._waiting_ids)

    def tokens_so_far(self, request_id: Hashable) -> int:
        """Tokens generated so far by a request (a preempted one keeps its tokens; 0 if
        unknown)."""
        req = self._running.get(request_id)
        if req is None:
            waiting = self._waiting_ids.get(request_id)
            return 0 if waiting is None else int(waiting.done_tokens)
        return int(min(req.num_tokens, max(0.0, self._p - req.start_p)))

    def running_contexts(self) -> list[tuple[Hashable, int]]:
        """``(request_id, context tokens)`` of every running request: its prompt (for a
        continuation, the carried prefix) plus the tokens it has generated here so far."""
        p = self._p  # as tokens_so_far, without its two calls per request (a re-balance
        # check lists the costliest replicas' responses: this is on its critical path)
        return [(rid, req.prompt_tokens + (
                    req.num_tokens if p - req.start_p >= req.num_tokens
                    else int(p - req.start_p) if p - req.start_p > 0 else 0))
                for rid, req in self._running.items()]

    def _tau(self, b: int) -> float:
        if b >= len(self._taus):
            self._taus = self.config.throughput.taus(max(2 * b, 64)).tolist()
        return self._taus[b]

    def kv_tokens(self) -> float:
        """KV tokens held by the running requests (prompt + generated)."""
        return self._sum_prompt + len(self._running) * self._p - self._sum_start_p

    def next_event_s(self) -> float:
        """Time of the next internal event (a completion, the end of a prefill stall, or the
        step at which the KV capacity would overflow)."""
        if self._next_s is not None:
            return self._next_s
        if not self._running:
            t = math.inf
        elif self._stall_until_s > self.now_s:
            t = self._stall_until_s
        else:
            self._drop_stale()
            target_p = min(self._heap[0][0], self._overflow_p())
            t = self.now_s + self._span_s(max(0.0, target_p - self._p))
        self._next_s = t
        return t

    def _overflow_p(self, extra_prompt: float = 0.0, extra_start_p: float = 0.0,
                    extra_running: int = 0) -> float:
        """First whole progress ``P`` at which the running set (plus an optional candidate)
        cannot take another step: ``C(P) + b > capacity``; inf without a capacity or with
        one request (a request that fits alone was checked at submit)."""
        b = len(self._running) + extra_running
        if self._cap is None or b <= 1:
            return math.inf
        s0 = self._sum_prompt + extra_prompt - self._sum_start_p - extra_start_p
        return float(math.floor((self._cap - s0) / b + 1e-9))

    def step_s(self) -> float:
        """Seconds of the current decode step (0 when idle)."""
        b = len(self._running)
        if b == 0:
            return 0.0
        return self._tau(b) + self._k * (self._sum_prompt + b * self._p - self._sum_start_p)

    def _span_s(self, dp: float) -> float:
        """Seconds to advance progress by ``dp`` with the current running set."""
        rate = self.step_s()
        if self._k == 0:
            return dp * rate
        return dp * rate + self._k * len(self._running) * dp * dp / 2.0

    def _progress_in(self, dt: float) -> float:
        """Progress made in ``dt`` seconds of decoding (inverse of ``_span_s``)."""
        rate = self.step_s()
        if self._k == 0:
            return dt / rate
        curv = self._k * len(self._running)
        return 2.0 * dt / (rate + math.sqrt(rate * rate + 2.0 * curv * dt))

    # ----- inputs --------------------------------------------------------------------
    def submit(
        self,
        request_id: Hashable,
        num_tokens: int,
        prompt_tokens: int = 0,
        *,
        cached_tokens: int = 0,
        continuation: bool = False,
        priority: int = 0,
    ) -> None:
        """Add a request at ``now_s``; it runs at once unless the cap is reached.

        ``cached_tokens``: leading prompt tokens already in this replica's prefix cache; they are
        not prefilled again. ``continuation``: the prompt carries a moved response's prefix
        (its prompt plus the tokens earlier pieces generated); the uncached part is prefilled
        at the recompute rate (``ReplicaConfig.recompute_cost_s``), as vLLM recomputes a
        preempted request, instead of the first-prefill cost. ``priority``: lower runs
        earlier (read only under the priority policy, as vLLM reads it)."""
        if request_id in self._running or request_id in self._waiting_ids:
            raise ValueError(f"request {request_id!r} is already on this replica")
        if num_tokens < 0:
            raise ValueError(f"request {request_id!r}: num_tokens must be >= 0")
        if not 0 <= cached_tokens <= max(int(prompt_tokens), 0):
            raise ValueError(
                f"request {request_id!r}: cached_tokens must be in [0, prompt_tokens], "
                f"got {cached_tokens} of {prompt_tokens}"
            )
        need = int(prompt_tokens) + max(int(num_tokens), 1)
        if self._cap is not None and need > self._cap:
            raise TraceError(
                f"request {request_id!r} needs {need} KV tokens (prompt + response), more than "
                f"the replica's kv_capacity_tokens {self._cap}"
            )
        req = _Req(request_id, int(num_tokens), int(prompt_tokens),
                   int(prompt_tokens) - int(cached_tokens), bool(continuation),
                   priority=int(priority), arrival=self._arrivals)
        self._arrivals += 1
        self._next_s = None
        self._waiting.append(req)
        self._waiting_ids[request_id] = req
        self._admit()

    def abort(self, request_id: Hashable) -> int:
        """Remove a request at ``now_s``; returns the tokens it had generated (wasted)."""
        self._next_s = None
        req = self._waiting_ids.pop(request_id, None)
        if req is not None:
            self._waiting.remove(req)
            return int(req.done_tokens)
        done = self.tokens_so_far(request_id)
        req = self._running.pop(request_id, None)
        if req is None:
            return 0
        self._sum_prompt -= req.prompt_tokens
        self._sum_start_p -= req.start_p
        self._admit()
        return done

    # ----- time ----------------------------------------------------------------------
    def pop_next(self) -> list[Completion]:
        """Advance to the next internal event and return the requests completing there."""
        t = self.next_event_s()
        if math.isinf(t):
            return []
        return self.advance(t)

    def advance(self, until_s: float) -> list[Completion]:
        """Advance time to ``until_s``, returning every completion on the way, in order."""
        out: list[Completion] = []
        while True:
            t = self.next_event_s()
            if t > until_s:
                break
            self._move_to(t)
            out.extend(self._complete_due())
            self._enforce_capacity()
        self._move_to(until_s)
        return out

    def _move_to(self, t: float) -> None:
        if t <= self.now_s:
            return
        self._next_s = None
        if self._running:
            decode_from = max(self.now_s, self._stall_until_s)
            if t > decode_from:
                self._p += self._progress_in(t - decode_from)
                near = round(self._p)
                if abs(self._p - near) <= 1e-9 * max(1.0, abs(self._p)):
                    self._p = float(near)  # events sit on whole tokens; undo rounding drift
            self.busy_s += t - self.now_s
        self.now_s = t

    def _complete_due(self) -> list[Completion]:
        out: list[Completion] = []
        eps = 1e-9 * max(1.0, abs(self._p))
        while self._heap:
            finish_p, _, rid = self._heap[0]
            req = self._running.get(rid)
            if req is None or req.start_p + req.num_tokens != finish_p:
                heapq.heappop(self._heap)
                continue
            if finish_p > self._p + eps:
                break
            heapq.heappop(self._heap)
            self._next_s = None
            del self._running[rid]
            self._sum_prompt -= req.prompt_tokens
            self._sum_start_p -= req.start_p
            out.append(Completion(rid, self.now_s, req.num_tokens))
        if out:
            self._admit()
        return out

    def _drop_stale(self) -> None:
        while self._heap:
            finish_p, _, rid = self._heap[0]
            req = self._running.get(rid)
            if req is not None and req.start_p + req.num_tokens == finish_p:
                return
            heapq.heappop(self._heap)

    def _enforce_capacity(self) -> None:
        """Preempt the newest running requests until the next step fits the KV capacity."""
        if self._cap is None:
            return
        preempted = False
        while self._overflow_p() <= self._p + 1e-9:
            rid = self._victim()
            req = self._running.pop(rid)
            self._sum_prompt -= req.prompt_tokens
            self._sum_start_p -= req.start_p
            req.done_tokens = self._p - req.start_p
            req.start_p = math.nan
            self._waiting.appendleft(req)
            self._waiting_ids[rid] = req
            self.num_preemptions += 1
            self._next_s = None
            preempted = True
        if preempted:
            self._admit()

    def _victim(self) -> Hashable:
        """The running request to preempt: the newest (FCFS) or the one of largest
        ``(priority, arrival)`` (priority policy)."""
        if not self.priority:
            return next(reversed(self._running))
        return max(self._running.values(), key=lambda r: (r.priority, r.arrival)).request_id

    def _fits(self, req: _Req) -> bool:
        """Whether the running set with ``req`` admitted can take at least one more step."""
        if self._cap is None or not self._running:
            return True
        start = self._p - req.done_tokens
        return self._overflow_p(req.prompt_tokens, start, 1) > self._p + 1e-9

    def _admit(self) -> None:
        cap = self.config.max_num_seqs
        while self._waiting and (cap is None or len(self._running) < cap):
            req = self._waiting.head()
            if self._running and not self._fits(req):
                break
            self._waiting.popleft()
            self._next_s = None
            del self._waiting_ids[req.request_id]
            recompute = round(req.done_tokens)
            cached = req.prompt_tokens - req.prefill_tokens
            if recompute > 0:
                stall = self.config.recompute_cost_s(req.prompt_tokens + recompute)
            elif req.continuation:
                stall = self.config.recompute_cost_s(req.prefill_tokens, cached)
            else:
                stall = self.config.prefill_cost_s(req.prefill_tokens, cached)
            if recompute > 0:
                self.recomputed_tokens += req.prompt_tokens + recompute
            if stall > 0:
                self._stall_until_s = max(self._stall_until_s, self.now_s) + stall
            req.start_p = self._p - req.done_tokens
            self._running[req.request_id] = req
            self._sum_prompt += req.prompt_tokens
            self._sum_start_p += req.start_p
            heapq.heappush(self._heap, (req.start_p + req.num_tokens, self._seq, req.request_id))
            self._seq += 1
