"""SGLang's native ``/generate`` request parsing and response JSON for the emulator.

The shape follows SGLang's ``GenerateReqInput`` and its tokenizer manager's output dict:
request ``{text | input_ids, sampling_params: {max_new_tokens, n, min_new_tokens, ignore_eos,
sampling_seed, ...}, return_logprob, stream, rid}``; response ``{text, output_ids, meta_info:
{id, finish_reason: {type, ...}, prompt_tokens, completion_tokens, cached_tokens, e2e_latency,
output_token_logprobs: [[logprob, token_id, null], ...]}}``, a list of those when
``sampling_params.n > 1``. Streaming sends cumulative ``data:`` objects then ``data: [DONE]``.
``POST /abort_request {"rid"}`` aborts a running request: its ``/generate`` answers with what
was generated so far and ``finish_reason.type == "abort"`` (what slime relies on).
"""

from __future__ import annotations

from typing import Any

from tailsieve.runtime.emulator.protocol import BadRequest, GenRequest, _opt_int, _prompt_ids
from tailsieve.runtime.emulator.responses import FILLER, FILLER_LOGPROB, FILLER_TOKEN_ID

DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's SamplingParams default
EOS_TOKEN_ID = 2  # reported in finish_reason.matched for a "stop" finish


def _int(sp: dict[str, Any], key: str, lo: int) -> int | None:
    return _opt_int(sp, key, lo, "sampling_params.")


def parse_generate(body: Any, max_model_len: int) -> tuple[GenRequest, str | None]:
    """Validate a ``/generate`` body (single prompt); returns the request and its ``rid``."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    if "input_ids" in body and body["input_ids"] is not None:
        ids = _prompt_ids(body["input_ids"])
    elif isinstance(body.get("text"), str):
        ids = _prompt_ids(body["text"])
    else:
        raise BadRequest("Either text or input_ids should be provided.")
    if len(ids) != 1:
        raise BadRequest("the emulator serves one prompt per /generate request")
    sp = body.get("sampling_params") or {}
    if not isinstance(sp, dict):
        raise BadRequest("sampling_params must be an object")
    n = _int(sp, "n", 1) or 1
    max_new = _int(sp, "max_new_tokens", 0)
    max_new = DEFAULT_MAX_NEW_TOKENS if max_new is None else max_new
    prompt_len = len(ids[0])
    if prompt_len + max_new > max_model_len:
        max_new = max(max_model_len - prompt_len, 0)  # SGLang clips to the context length
    if prompt_len >= max_model_len:
        raise BadRequest(
            f"The input ({prompt_len} tokens) is longer than the model's context length "
            f"({max_model_len} tokens)."
        )
    rid = body.get("rid")
    if rid is not None and not isinstance(rid, str):
        raise BadRequest("rid must be a string")
    req = GenRequest(
        kind="completion",
        prompt_tokens=(prompt_len,),
        prompt_ids=ids,
        n=n,
        max_tokens=max(max_new, 1),
        min_tokens=min(_int(sp, "min_new_tokens", 0) or 0, max(max_new, 1)),
        ignore_eos=bool(sp.get("ignore_eos", False)),
        seed=_int(sp, "sampling_seed", 0),
        stream=bool(body.get("stream", False)),
        include_usage=False,
        logprobs=0 if body.get("return_logprob") else None,
        return_token_ids=True,
    )
    return req, rid


def finish_reason(reason: str, num_tokens: int) -> dict[str, Any]:
    """SGLang's finish_reason object: stop (matched EOS), length, or abort."""
    if reason == "stop":
        return {"type": "stop", "matched": EOS_TOKEN_ID}
    if reason == "length":
        return {"type": "length", "length": num_tokens}
    return {"type": "abort", "message": "Abort in waiting queue or running batch"}


def output(
    req: GenRequest,
    rid: str,
    num_tokens: int,
    reason: str | None,
    latency_s: float,
    cached_tokens: int = 0,
) -> dict[str, Any]:
    """One sequence's output dict (``reason`` None: still running, for a stream chunk);
    ``cached_tokens``: its prompt tokens found in the prefix cache."""
    meta: dict[str, Any] = {
        "id": rid,
        "finish_reason": None if reason is None else finish_reason(reason, num_tokens),
        "prompt_tokens": req.prompt_tokens[0],
        "weight_version": "default",
        "completion_tokens": num_tokens,
        "cached_tokens": cached_tokens,
        "e2e_latency": latency_s,
    }
    if req.logprobs is not None:
        meta["input_token_logprobs"] = []
        meta["output_token_logprobs"] = [[FILLER_LOGPROB, FILLER_TOKEN_ID, None]] * num_tokens
    return {
        "text": FILLER * num_tokens,
        "output_ids": [FILLER_TOKEN_ID] * num_tokens,
        "meta_info": meta,
    }
