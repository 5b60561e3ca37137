"""slime ``Sample`` handling, duck-typed (slime's ``Sample`` or anything with its fields).

slime *continues* an aborted sample (it keeps ``tokens``/``response`` and asks for the rest);
TailSieve's carried prompts must restart from scratch, so every group TailSieve holds is kept
pristine: ``restart`` drops whatever an earlier attempt generated.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tailsieve.runtime.engine.backends import Response

STATUS_OF = {"stop": "COMPLETED", "length": "TRUNCATED"}


def restart(sample: Any) -> None:
    """Back to the prompt only: no response, tokens = the prompt's ids (when known)."""
    n = int(getattr(sample, "response_length", 0) or 0)
    tokens = list(getattr(sample, "tokens", None) or [])
    sample.tokens = tokens[: len(tokens) - n] if 0 < n <= len(tokens) else ([] if n else tokens)
    sample.response = ""
    sample.response_length = 0
    sample.rollout_log_probs = None
    sample.loss_mask = None
    sample.reward = None
    for name in (
        "rollout_top_p_token_ids",
        "rollout_top_p_token_offsets",
        "rollout_routed_experts",
    ):
        if hasattr(sample, name):
            setattr(sample, name, None)
    sample.status = type(sample).Status.PENDING
    meta = getattr(sample, "metadata", None)
    if isinstance(meta, dict):
        meta.pop("start_rollout_id", None)


def fill(sample: Any, prompt_ids: Sequence[int], response: Response, info: dict[str, Any]) -> None:
    """Write one generated response into a pristine sample (like slime's ``generate``)."""
    if response.token_ids is None or response.logprobs is None:
        raise ValueError("a response without token ids or log-probs cannot be trained on")
    ids = list(response.token_ids)
    sample.tokens = list(prompt_ids) + ids
    sample.response = response.text
    sample.response_length = len(ids)
    sample.rollout_log_probs = [float(x) for x in response.logprobs]
    sample.loss_mask = [1] * len(ids)
    status = STATUS_OF.get(response.finish_reason, "COMPLETED")
    sample.status = getattr(type(sample).Status, status)
    if isinstance(getattr(sample, "metadata", None), dict):
        sample.metadata["tailsieve"] = info
