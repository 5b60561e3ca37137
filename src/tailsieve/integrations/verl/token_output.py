"""verl's ``TokenOutput`` of a turn: a view over its chain of pieces.

The token ids and log-probs are the chain's join (``runtime.execution.chain.ResponseChain.join``); what
only verl's server says comes from each piece's ``detail`` (the server's own ``TokenOutput``):
``routed_experts`` joined as verl's ``FullyAsyncLLMServerClient`` joins a resumed request (the
first piece's rows, then each later piece's rows of its new tokens); ``num_preempted`` summed;
``extra_fields`` the first piece's with ``num_cached_tokens`` (the turn's prefix hit: the first
piece's), ``global_steps`` (the last piece's), ``min_global_steps`` / ``max_global_steps`` over
the pieces, and speculative-decoding counts summed. The stop reason is the last piece's, or
``"aborted"`` for a turn the server aborted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from verl.workers.rollout.replica import TokenOutput

from tailsieve.runtime.execution.chain import Piece, ResponseChain

SUMMED_EXTRA = ("spec_num_draft_tokens", "spec_num_accepted_tokens", "spec_num_verify_steps")
ABORTED = "aborted"


def verl_output(chain: Sequence[Piece], aborted: bool = False) -> TokenOutput:
    """The turn whose pieces are ``chain`` (in order; each ``detail`` a ``TokenOutput``)."""
    joined = ResponseChain(max_tokens=0, pieces=list(chain)).join()
    outs = [p.detail for p in chain if p.detail is not None]
    lps = joined.logprobs
    return TokenOutput(
        token_ids=list(map(int, joined.token_ids or ())),
        log_probs=None if lps is None else [float(x) for x in lps],
        routed_experts=_routed_experts(outs),
        stop_reason=ABORTED if aborted or not outs else outs[-1].stop_reason,
        num_preempted=_sum_or_none(p.num_preempted for p in outs),
        extra_fields=_extra(outs) if outs else {},
    )


def piece_of(out: Any) -> Piece:
    """A piece of the chain from verl's ``TokenOutput`` (one the server aborted)."""
    lps = out.log_probs
    return Piece(tuple(int(t) for t in out.token_ids), "", "moved",
                 None if lps is None else tuple(float(x) for x in lps), detail=out)


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
