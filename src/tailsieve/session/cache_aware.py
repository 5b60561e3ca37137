"""SGLang router's ``cache_aware`` policy, per turn (what slime and SGLang users run).

Follows ``sgl-router/src/policies/cache_aware.rs`` (``sgl-project/sglang``; now the SGLang
Model Gateway, ``model_gateway/src/policies/cache_aware.rs``):

- the load of a worker is its requests in flight at the router;
- if ``max - min > balance_abs_threshold`` and ``max > balance_rel_threshold * min`` the pool is
  *imbalanced*: the request goes to the least loaded worker (the first such);
- otherwise it goes by an *approximate radix tree* of the prompts the router sent to each
  worker (not the workers' real caches): the worker with the longest prefix match, if the
  match covers more than ``cache_threshold`` of the prompt; else the worker whose tree is
  smallest ("most available cache");
- either way the prompt is inserted into the chosen worker's tree.

Defaults are the gateway's (``cache_threshold`` 0.3, ``balance_abs_threshold`` 64,
``balance_rel_threshold`` 1.5; older sgl-router releases used 0.5 / 32 / 1.0001, and slime's
example scripts pass ``--sglang-router-balance-abs-threshold 0``).

The tree is kept in tokens: a session's prompt at turn ``t`` is a prefix of its prompt at
turn ``t+1``, so the match on a worker is the longest prompt of the session it was sent
there, or its group's shared prompt if a sibling's was (the tree grows by the unmatched
part). The gateway's periodic LRU eviction of the tree (``max_tree_size``, 2^26 characters)
is not modelled.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from tailsieve.errors import ConfigError
from tailsieve.session.decision import TurnDecision
from tailsieve.session.replica_view import ReplicaView
from tailsieve.session.router_base import SessionPolicy, decide, healthy_views
from tailsieve.session.sticky import imbalanced
from tailsieve.session.turn import TurnRequest

__all__ = ["CacheAware"]


class CacheAware:
    """SGLang's cache_aware router over turns (see the module docstring)."""

    policy = SessionPolicy.CACHE_AWARE

    def __init__(self, cache_threshold: float = 0.3, balance_abs_threshold: int = 64,
                 balance_rel_threshold: float = 1.5) -> None:
        if not 0 <= cache_threshold <= 1:
            raise ConfigError(f"cache_threshold must be in [0, 1], got {cache_threshold}")
        if balance_abs_threshold < 0 or balance_rel_threshold < 0:
            raise ConfigError("balance thresholds must be >= 0")
        self.cache_threshold = cache_threshold
        self.abs_threshold = balance_abs_threshold
        self.rel_threshold = balance_rel_threshold
        self._sent: dict[Hashable, dict[int, int]] = {}  # session -> worker -> longest prompt
        self._group_prompt: dict[Hashable, int] = {}  # group -> its prompt (turn 0's)
        self._group_on: dict[Hashable, dict[int, int]] = {}  # group -> worker -> order sent
        self._tree_tokens: dict[int, int] = {}  # worker -> tokens in its tree
        self._clock = 0
        self._last: dict[Hashable, int] = {}  # session -> worker of its last turn

    def _match(self, turn: TurnRequest, alive: Sequence[ReplicaView]) -> tuple[int, int]:
        """(tokens, worker) of the longest prefix match among ``alive`` (worker -1: none)."""
        best, best_r, best_t = 0, -1, -1
        sent = self._sent.get(turn.session_id, {})
        gp = self._group_prompt.get(turn.group_id, 0) if turn.group_id is not None else 0
        g_on = self._group_on.get(turn.group_id, {}) if turn.group_id is not None else {}
        for v in alive:
            r = v.replica
            n = min(max(sent.get(r, 0), gp if r in g_on else 0), turn.context_tokens)
            t = g_on.get(r, -1)
            if n > best or (n == best and n > 0 and t > best_t):
                best, best_r, best_t = n, r, t
        return best, best_r

    def choose(self, turn: TurnRequest, views: Sequence[ReplicaView],
               elapsed_s: float) -> TurnDecision:
        alive = healthy_views(turn, views)
        matched, r = self._match(turn, alive)
        if imbalanced(views, self.abs_threshold, self.rel_threshold):
            low = min(v.num_in_flight for v in alive)
            r = next(v.replica for v in alive if v.num_in_flight == low)
        elif turn.context_tokens == 0 or matched / turn.context_tokens <= self.cache_threshold:
            r = min(alive, key=lambda v: (self._tree_tokens.get(v.replica, 0), v.replica)).replica
        self._insert(turn, r)
        home = self._last.get(turn.session_id)
        ok = home is not None and any(v.replica == home for v in alive)
        self._last[turn.session_id] = r
        return decide(turn, r, home, ok)

    def _insert(self, turn: TurnRequest, r: int) -> None:
        sent = self._sent.setdefault(turn.session_id, {})
        have = sent.get(r, 0)
        if turn.group_id is not None:
            if turn.turn_index == 0 or turn.group_id not in self._group_prompt:
                self._group_prompt.setdefault(turn.group_id, turn.context_tokens)
            g_on = self._group_on.setdefault(turn.group_id, {})
            if r in g_on:
                have = max(have, min(self._group_prompt[turn.group_id], turn.context_tokens))
            self._clock += 1
            g_on[r] = self._clock
        grow = max(turn.context_tokens - have, 0)
        self._tree_tokens[r] = self._tree_tokens.get(r, 0) + grow
        sent[r] = max(sent.get(r, 0), turn.context_tokens)

    def forget(self, session_id: Hashable) -> None:
        """The session ended; its prompts stay in the tree (the gateway keeps them until its
        LRU eviction), only the router's per-session index is dropped."""
        self._last.pop(session_id, None)
        self._sent.pop(session_id, None)
