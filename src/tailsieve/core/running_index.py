"""Running responses by replica, kept as they change: a live step's (for re-balancing) and the
session book's running turns (``session.book``).

A re-balance check needs each replica's number of running responses and the context tokens
they hold, and the responses of a few replicas (those the planner would shed from). Building
that by reading every running response at every check costs O(running) per check: about 10 ms
at 4,096 in flight, all of it blocking the router's event loop. ``RunningIndex`` keeps it up
to date instead, from the events of the responses (a piece starts, a piece ends, a response
moves or completes), so that a check costs O(replicas) plus the responses it actually reads.

What a response holds (as ``runtime.step.live_moves.LiveResponse`` describes it): the tokens known
(``known``: prompt + generated up to its last seam + what its running piece streamed) and, for
an unstreamed running piece, the tokens the progress clock says it generated since it began,
at most its cap: ``min(cap, clock(on, now) - clock(on, start))``. The clock's value at a time
it has closed never changes (``ProgressClock``), so once a piece's start is closed its
``clock(on, start)`` (``base``) is fixed; the index then sums such pieces per (replica, clock
replica) as ``count * clock(on, now) - sum of bases`` and moves each to a capped sum when its
estimate reaches its cap (a heap of ``base + cap`` per clock replica). Pieces whose base is
not fixed yet (started since the last check, or on a replica the clock has not seen) are
estimated one by one. The sums are the per-response estimates without their rounding down to
whole tokens (under one token per response); a replica's responses (``running_on``) are exact.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from tailsieve.core.progress_clock import ProgressClock, capped

Key = Hashable  # a step's (prompt id, sample); the book's session id

__all__ = ["Entry", "Key", "RunningIndex"]


@dataclass(slots=True)
class Entry:
    """One running response."""

    replica: int  # plan replica it counts on (its next piece goes there)
    known: int  # context tokens known: prompt + generated to the last seam + streamed
    prompt_tokens: int  # of them, the prompt's (0 when not known yet)
    dealt: tuple[int, ...]  # plan replicas its group was dealt (its prompt is cached there)
    owner: object = None  # the attempt that reports its events (others are ignored)
    on: int = -1  # replica its unstreamed running piece runs on (-1: none)
    start_s: float = 0.0  # when that piece began, on the step's clock, seconds
    cap: int = 0  # most tokens that piece may add
    base: float | None = None  # the clock of ``on`` at ``start_s``, once fixed
    capped: bool = False  # (fixed pieces) the estimate has reached ``cap``
    seq: int = 0  # its running piece's number in the index (stale heap items are skipped)


@dataclass(slots=True)
class RunningIndex:
    """Running responses by replica; ``tails``: the plan's tail-pool replicas."""

    tails: frozenset[int] = frozenset()
    entries: dict[Key, Entry] = field(default_factory=dict)
    _on: dict[int, dict[Key, Entry]] = field(default_factory=dict)  # replica -> its entries
    _known: dict[int, int] = field(default_factory=dict)  # replica -> sum of known
    _pending: dict[Key, Entry] = field(default_factory=dict)  # pieces with no fixed base
    _count: dict[tuple[int, int], int] = field(default_factory=dict)  # (replica, on) -> fixed
    _bases: dict[tuple[int, int], float] = field(default_factory=dict)  # and their bases
    _capped: dict[int, int] = field(default_factory=dict)  # replica -> caps reached
    _heaps: dict[int, list[tuple[float, int, Key]]] = field(default_factory=dict)  # by ``on``
    _owned: dict[object, list[Key]] = field(default_factory=dict)  # owner -> its keys
    _num_pieces: int = 0  # pieces started (numbers them)
    on_complete: Callable[[], None] | None = None  # told of each response completion
    on_moved: Callable[[Key], None] | None = None  # told when a move takes effect

    # -- events ------------------------------------------------------------------------------

    def add(self, key: Key, replica: int, known: int, prompt_tokens: int,
            dealt: tuple[int, ...], owner: object = None) -> None:
        """A response starts running (replacing any entry of the same key)."""
        self.remove(key)
        e = self.entries[key] = Entry(replica, known, prompt_tokens, dealt, owner)
        self._on.setdefault(replica, {})[key] = e
        self._known[replica] = self._known.get(replica, 0) + known
        if owner is not None:
            self._owned.setdefault(owner, []).append(key)

    def remove(self, key: Key, owner: object = None) -> None:
        """A response completed or stopped running (no-op if not indexed)."""
        e = self._get(key, owner)
        if e is None:
            return
        self._end_piece(key, e)
        del self.entries[key]
        del self._on[e.replica][key]
        self._known[e.replica] -= e.known

    def completed(self, key: Key, owner: object = None) -> None:
        """A response completed: it leaves the index and ``on_complete`` is told (the live
        rebalancer checks at a completion, as the simulator does)."""
        if self._get(key, owner) is None:
            return
        self.remove(key, owner)
        if self.on_complete is not None:
            self.on_complete()

    def moved(self, key: Key, owner: object = None) -> None:
        """A moved response's next piece began on its new replica: ``on_moved`` is told."""
        if self.on_moved is not None and self._get(key, owner) is not None:
            self.on_moved(key)

    def drop_owner(self, owner: object) -> None:
        """Every response ``owner`` reported (its group stopped running)."""
        for key in self._owned.pop(owner, ()):
            self.remove(key, owner)

    def set_replica(self, key: Key, replica: int, owner: object = None) -> None:
        """The response now counts on ``replica`` (moved, or continued after a fault)."""
        e = self._get(key, owner)
        if e is None or e.replica == replica:
            return
        fixed = e.base is not None
        if fixed:
            self._sub(e)
        del self._on[e.replica][key]
        self._known[e.replica] -= e.known
        e.replica = replica
        self._on.setdefault(replica, {})[key] = e
        self._known[replica] = self._known.get(replica, 0) + e.known
        if fixed:
            self._add(e)

    def set_known(self, key: Key, known: int, prompt_tokens: int, owner: object = None) -> None:
        """The tokens known of the response changed (a piece streamed or ended)."""
        e = self._get(key, owner)
        if e is None:
            return
        self._known[e.replica] += known - e.known
        e.known, e.prompt_tokens = known, prompt_tokens

    def piece_started(self, key: Key, owner: object, on: int, start_s: float, cap: int) -> None:
        """An unstreamed piece of at most ``cap`` tokens began on ``on`` at ``start_s``."""
        e = self._get(key, owner)
        if e is None:
            return
        self._end_piece(key, e)
        self._num_pieces += 1
        e.on, e.start_s, e.cap, e.seq = on, start_s, max(cap, 0), self._num_pieces
        self._pending[key] = e

    def piece_ended(self, key: Key, known: int, prompt_tokens: int, owner: object = None) -> None:
        """The running piece ended; ``known`` now includes what it generated."""
        e = self._get(key, owner)
        if e is None:
            return
        self._end_piece(key, e)
        self.set_known(key, known, prompt_tokens, owner)

    # -- reading -----------------------------------------------------------------------------

    def get(self, key: Key) -> Entry | None:
        return self.entries.get(key)

    def load(self, replica: int) -> tuple[int, int]:
        """(running responses, context tokens known) of ``replica``."""
        es = self._on.get(replica)
        return (len(es), self._known[replica]) if es else (0, 0)

    def pool(self, replica: int) -> int:
        return int(replica in self.tails)

    def sums(self, clock: ProgressClock | None = None, now_s: float = 0.0,
             ) -> dict[int, tuple[int, float]]:
        """Replica -> (running responses, context tokens), with unstreamed pieces' progress
        estimated by ``clock`` at ``now_s`` (only the known tokens when ``clock`` is None)."""
        out = {r: (len(es), float(self._known[r])) for r, es in self._on.items() if es}
        if clock is None:
            return out
        at = self._settle(clock, now_s)
        extra: dict[int, float] = dict.fromkeys(out, 0.0)
        bases = self._bases
        for (r, on), n in self._count.items():
            extra[r] += n * at[on] - bases[(r, on)]
        for r, c in self._capped.items():
            if c:
                extra[r] += c
        for e in self._pending.values():
            extra[e.replica] += clock.piece_tokens(e.on, e.start_s, now_s, e.cap)
        return {r: (n, ctx + extra[r]) for r, (n, ctx) in out.items()}

    def running_on(self, replica: int, clock: ProgressClock | None = None, now_s: float = 0.0,
                   ) -> list[tuple[Key, int]]:
        """(key, context tokens) of the responses counting on ``replica``, each estimated as
        in ``sums`` but rounded down to whole tokens."""
        es = self._on.get(replica)
        if not es:
            return []
        if clock is None:
            return [(key, e.known) for key, e in es.items()]
        out = []
        at: dict[int, float] = {}
        for key, e in es.items():
            n = e.known
            on = e.on
            if on >= 0:
                end = at.get(on)
                if end is None:
                    end = at[on] = clock.tokens_at(on, now_s)
                base = e.base
                n += capped(end - (base if base is not None else
                                   clock.tokens_at(on, e.start_s)), e.cap)
            out.append((key, n))
        return out

    # -- internals ---------------------------------------------------------------------------

    def _get(self, key: Key, owner: object) -> Entry | None:
        e = self.entries.get(key)
        if e is None or (owner is not None and e.owner is not owner):
            return None
        return e

    def _settle(self, clock: ProgressClock, now_s: float) -> dict[int, float]:
        """Fix the bases the clock has closed, and cap the pieces that reached their cap.
        Returns the clock at ``now_s`` of every replica pieces run on."""
        closed = clock.closed_s
        if self._pending:
            for key, e in list(self._pending.items()):
                if e.start_s <= closed and clock.knows(e.on):
                    del self._pending[key]
                    e.base = clock.tokens_at(e.on, e.start_s)
                    self._add(e)
                    heapq.heappush(self._heaps.setdefault(e.on, []),
                                   (e.base + e.cap, e.seq, key))
        at = {}
        for on, heap in self._heaps.items():
            v = at[on] = clock.tokens_at(on, now_s)
            while heap and heap[0][0] <= v:
                _, seq, key = heapq.heappop(heap)
                got = self.entries.get(key)
                if got is None or got.seq != seq or got.base is None or got.capped:
                    continue  # the piece ended (or the response left) since it was pushed
                self._sub(got)
                got.capped = True
                self._add(got)
        return at

    def _add(self, e: Entry) -> None:
        """Count a fixed piece in the sums of its replica."""
        if e.capped:
            self._capped[e.replica] = self._capped.get(e.replica, 0) + e.cap
            return
        k = (e.replica, e.on)
        self._count[k] = self._count.get(k, 0) + 1
        self._bases[k] = self._bases.get(k, 0.0) + e.base  # type: ignore[operator]

    def _sub(self, e: Entry) -> None:
        """Take a fixed piece out of the sums of its replica."""
        if e.capped:
            self._capped[e.replica] -= e.cap
            return
        k = (e.replica, e.on)
        n = self._count[k] - 1
        if n:
            self._count[k] = n
            self._bases[k] -= e.base  # type: ignore[operator]
        else:  # none left: drop the pair (and the rounding its sum carried)
            del self._count[k], self._bases[k]

    def _end_piece(self, key: Key, e: Entry) -> None:
        if e.on < 0:
            return
        if e.base is not None:
            self._sub(e)
        self._pending.pop(key, None)
        e.on, e.base, e.capped = -1, None, False

