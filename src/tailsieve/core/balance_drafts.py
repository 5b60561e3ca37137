"""Pricing a move by the drafts it gains or loses (pure, no I/O).

With a server's suffix tree (vLLM ``suffix``: arctic-inference's global tree per server, see
``model.acceptance``), a response drafts from the siblings that finished on its server. Moved
away from them it drafts without them, so each of its tokens takes ``rho = t(k_src) /
t(k_dst)`` times as many verify steps there (``t`` = the acceptance model's accepted tokens per
step, ``k`` = the group's responses dealt to that server, the moved one included: late in a
step, when moves happen, most of them have finished). ``rho > 1`` loses drafts; ``rho < 1`` (a
move toward its siblings) gains. A source whose drafts do not depend on placement (prompt
lookup, EAGLE/MTP, Seer's group drafter, the previous epoch) prices every move at 1.

The balancer (``core.balancer``) prices a move of ``x`` from ``top`` to ``d`` as
``horizon * (c_top - max(A, B)) / c_top - cost`` with ``A`` = the top's iteration cost without
``x`` and ``B`` = ``d``'s with it. ``x`` advances on ``d`` as if ``d`` cost ``B * rho``, so
``reprice_gain`` replaces ``max(A, B)`` by ``max(A, B * rho)``; a move is kept while that gain
stays positive. Lengths are never read: only where each group was dealt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tailsieve.errors import ConfigError
from tailsieve.model.acceptance import AcceptanceCurve

DraftFactor = Callable[[int, int, int], float]  # (request, src, dst) -> rho


def reprice_gain(predicted_gain_s: float, horizon_s: float, c_top: float, a: float, b: float,
                 rho: float) -> float:
    """The balancer's predicted gain with ``x``'s progress on the destination slowed (or sped
    up) by ``rho``: ``predicted_gain_s - horizon * (max(A, B rho) - max(A, B)) / c_top``."""
    if rho <= 0 or horizon_s < 0:
        raise ConfigError("rho must be > 0 and horizon_s >= 0")
    if c_top <= 0:
        return predicted_gain_s
    return predicted_gain_s - horizon_s * (max(a, b * rho) - max(a, b)) / c_top


@dataclass(frozen=True, slots=True)
class DraftPricing:
    """The drafts a move gains or loses, from the acceptance model."""

    curve: AcceptanceCurve

    def factor(self, k_src: int, k_dst: int) -> float:
        """``rho = t(k_src) / t(k_dst)``: verify steps per token on the destination relative to
        the source."""
        if k_src < 1 or k_dst < 1:
            raise ConfigError("k counts the moved response itself: must be >= 1")
        if not self.curve.server_siblings:
            return 1.0
        return self.curve.tau(k_src) / self.curve.tau(k_dst)

    def for_dealing(self, request_replica: Sequence[int], group_size: int) -> DraftFactor:
        """``rho`` of moving request ``i`` from ``src`` to ``dst`` when request ``j`` of the
        step was dealt to ``request_replica[j]`` (groups of ``group_size`` consecutive
        requests): ``k`` on a server = the group's requests dealt there, plus the moved one
        if it was not."""
        dealt = [int(r) for r in request_replica]

        def rho(i: int, src: int, dst: int) -> float:
            g = i // group_size
            members = dealt[g * group_size:(g + 1) * group_size]
            own = dealt[i]
            k_src = members.count(src) + (0 if own == src else 1)
            k_dst = members.count(dst) + (0 if own == dst else 1)
            return self.factor(k_src, k_dst)

        return rho
