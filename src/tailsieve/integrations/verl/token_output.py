"""One verl ``TokenOutput`` from the pieces of a turn, as if one server had generated it.

Token ids and log-probs are concatenated (a piece that returned no log-probs makes the join
have none); ``routed_experts`` are joined as verl's own ``FullyAsyncLLMServerClient`` joins a
resumed request (the first piece's rows, then each later piece's rows of its new tokens);
``num_preempted`` is summed; ``extra_fields`` are the first piece's with ``num_cached_tokens``
(the turn's prefix hit: the first piece's), ``global_steps`` (the last piece's),
``min_global_steps`` / ``max_global_steps`` over the pieces, and speculative-decoding counts
summed. The stop reason is the last piece's, or ``"aborted"`` for a turn the server aborted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from verl.workers.rollout.replica import TokenOutput

SUMMED_EXTRA = ("spec_num_draft_tokens", "spec_num_accepted_tokens", "spec_num_verify_steps")
ABORTED = "aborted"


def join_outputs(pieces: Sequence[Any], aborted: bool = False) -> TokenOutput:
    """The pieces' ``TokenOutput`` s (in order, at least one) joined into one."""
    if not pieces:
        return TokenOutput(token_ids=[], log_probs=None, stop_reason=ABORTED,
                           extra_fields={})
    tokens: list[int] = []
    for p in pieces:
        tokens.extend(map(int, p.token_ids))
    return TokenOutput(
        token_ids=tokens,
        log_probs=_log_probs(pieces),
        routed_experts=_routed_experts(pieces),
        stop_reason=ABORTED if aborted else pieces[-1].stop_reason,
        num_preempted=_sum_or_none(p.num_preempted for p in pieces),
        extra_fields=_extra(pieces),
    )


def _log_probs(pieces: Sequence[Any]) -> list[float] | None:
    out: list[float] = []
    for p in pieces:
        if p.log_probs is None:
            if p.token_ids:
                return None
            continue
        out.extend(float(x) for x in p.log_probs)
    return out if any(p.log_probs is not None for p in pieces) else None


def _routed_experts(pieces: Sequence[Any]) -> Any:
    joined = None
    for p in pieces:
        rx = p.routed_experts
        if rx is None or not p.token_ids:
            continue
        if joined is None:
            joined = rx
        else:
            joined = np.concatenate([np.asarray(joined), np.asarray(rx)[-len(p.token_ids):]])
    return joined


def _sum_or_none(values: Any) -> int | None:
    got = [int(v) for v in values if v is not None]
    return sum(got) if got else None


def _extra(pieces: Sequence[Any]) -> dict[str, Any]:
    extra = dict(pieces[0].extra_fields or {})
    steps = [p.extra_fields.get("global_steps") for p in pieces if p.extra_fields]
    known = [s for s in steps if s is not None]
    if steps:
        extra["global_steps"] = steps[-1]
    if known:
        extra["min_global_steps"] = min(known)
        extra["max_global_steps"] = max(known)
    for key in SUMMED_EXTRA:
        vals = [p.extra_fields.get(key) for p in pieces if p.extra_fields]
        if any(v is not None for v in vals):
            extra[key] = sum(int(v) for v in vals if v is not None)
    return extra
