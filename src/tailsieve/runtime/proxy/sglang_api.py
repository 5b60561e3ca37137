"""SGLang's native ``/generate``: requests parsed into ``ProxyRequest``, answers in its shape.

Request (SGLang's ``GenerateReqInput``): ``text`` or ``input_ids`` (one prompt or a list),
``sampling_params`` (SGLang's names: ``max_new_tokens``, ``min_new_tokens``,
``sampling_seed``, ``no_stop_trim``, ``n``, ...), ``return_logprob``,
``return_text_in_logprobs``, ``stream``, ``rid``. Answer (its tokenizer manager's output):
``{text, output_ids, meta_info: {id, finish_reason: {type, matched | length | message},
prompt_tokens, completion_tokens, cached_tokens, e2e_latency, output_token_logprobs:
[[logprob, token_id, text | null], ...]}}``, a list for ``n > 1`` or a list of prompts; a
stream sends cumulative outputs then ``[DONE]``. What a continued piece cannot keep is
refused with HTTP 400: SGLang's own sessions (``session_params``; send the whole context as
``input_ids`` with a routing key instead), grammars, top-k logprobs, LoRA, custom logit
processors, routed experts and hidden states.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tailsieve.runtime.proxy.api_error import bad_request
from tailsieve.runtime.proxy.request import (
    Api,
    PromptSpec,
    ProxyRequest,
    check_sampling,
    opt_bool,
    opt_int,
    token_id_list,
)
from tailsieve.runtime.proxy.sample import SampleOutput

JSON = dict[str, Any]
RENAMED = {"max_new_tokens": "max_tokens", "min_new_tokens": "min_tokens",
           "sampling_seed": "seed", "no_stop_trim": "include_stop_str_in_output"}
KEPT = ("temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty",
        "repetition_penalty", "stop", "stop_token_ids", "ignore_eos", "skip_special_tokens",
        "spaces_between_special_tokens", "logit_bias")
DROPPED = ("custom_params",)  # SGLang-only, read by custom logit processors (refused)
REFUSED_SAMPLING = ("json_schema", "regex", "ebnf", "structural_tag")
REFUSED = {
    "session_params": "SGLang sessions keep the context on one server; send the whole "
                      "context as input_ids with an X-SMG-Routing-Key header instead",
    "lora_path": "LoRA adapters are not supported by the TailSieve proxy",
    "custom_logit_processor": "custom logit processors are not supported",
    "return_hidden_states": "hidden states are not returned by the proxy",
    "return_routed_experts": "routed experts are not returned by the proxy",
    "image_data": "multimodal inputs are not supported by the proxy",
    "input_embeds": "input embeddings are not supported by the proxy",
}  # fmt: skip


def parse_generate(body: Any) -> ProxyRequest:
    """A ``/generate`` body (see the module docstring)."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    for key, why in REFUSED.items():
        if body.get(key) not in (None, False, [], {}):
            raise bad_request(f"'{key}' is not supported by the TailSieve proxy: {why}", key)
    if opt_int(body, "top_logprobs_num", 0, None):
        raise bad_request("top_logprobs_num is not supported by the TailSieve proxy (use the "
                          "OpenAI routes' logprobs for alternatives)", "top_logprobs_num")
    start = opt_int(body, "logprob_start_len", -1, None)
    if start not in (None, -1):
        raise bad_request("input logprobs (logprob_start_len) are not returned by the proxy",
                          "logprob_start_len")
    prompts, batch = _prompts(body)
    sp = body.get("sampling_params") or {}
    if not isinstance(sp, dict):
        raise bad_request("'sampling_params' must be one object (the proxy takes the same "
                          "sampling for every prompt)", "sampling_params")
    sampling, n, max_tokens = _sampling(sp)
    rid = body.get("rid")
    if rid is not None and not isinstance(rid, str):
        raise bad_request("'rid' must be a string", "rid")
    return ProxyRequest(
        api=Api.GENERATE, prompts=prompts, sampling=sampling, max_tokens=max_tokens, n=n,
        max_tokens_param="sampling_params.max_new_tokens",
        stream=bool(opt_bool(body, "stream")),
        logprobs=0 if opt_bool(body, "return_logprob") else None, rid=rid, batch=batch,
        text_in_logprobs=bool(opt_bool(body, "return_text_in_logprobs")),
    )


def _prompts(body: Mapping[str, Any]) -> tuple[tuple[PromptSpec, ...], bool]:
    ids, text = body.get("input_ids"), body.get("text")
    if (ids is None) == (text is None):
        raise bad_request("Either text or input_ids should be provided.", "input_ids")
    if ids is not None:
        if isinstance(ids, list) and ids and all(isinstance(x, list) for x in ids):
            return tuple(PromptSpec(token_ids=token_id_list(x, "input_ids")) for x in ids), True
        return (PromptSpec(token_ids=token_id_list(ids, "input_ids")),), False
    if isinstance(text, str) and text:
        return (PromptSpec(tokenize={"prompt": text, "add_special_tokens": True}),), False
    if isinstance(text, list) and text and all(isinstance(t, str) and t for t in text):
        return tuple(PromptSpec(tokenize={"prompt": t, "add_special_tokens": True})
                     for t in text), True
    raise bad_request("'text' must be a non-empty string or list of strings", "text")


def _sampling(sp: Mapping[str, Any]) -> tuple[dict[str, Any], int, int | None]:
    bad = [k for k in REFUSED_SAMPLING if sp.get(k) is not None]
    if bad:
        raise bad_request(f"sampling_params.{bad[0]} is not supported by the TailSieve proxy: "
                          "a grammar restarts in a continued piece", f"sampling_params.{bad[0]}")
    known = set(RENAMED) | set(KEPT) | set(DROPPED) | set(REFUSED_SAMPLING) | {"n"}
    unknown = sorted(k for k in sp if k not in known)
    if unknown:
        raise bad_request(f"unknown sampling_params field(s): {', '.join(unknown)}",
                          f"sampling_params.{unknown[0]}")
    out = {k: sp[k] for k in KEPT if sp.get(k) is not None}
    out.update({new: sp[old] for old, new in RENAMED.items() if sp.get(old) is not None})
    n = opt_int(sp, "n", 1, None, where="sampling_params.") or 1
    max_tokens = opt_int(out, "max_tokens", 0, None, where="sampling_params.")
    out.pop("max_tokens", None)
    if max_tokens == 0:
        raise bad_request("sampling_params.max_new_tokens must be >= 1 behind the proxy",
                          "sampling_params.max_new_tokens")
    check_sampling(out, where="sampling_params.")
    return out, n, max_tokens


def finish_reason(o: SampleOutput) -> JSON:
    """SGLang's finish_reason object."""
    if o.finish_reason == "stop":
        matched = o.stop_reason if o.stop_reason is not None else (
            o.token_ids[-1] if o.token_ids else None)
        return {"type": "stop", "matched": matched}
    if o.finish_reason == "length":
        return {"type": "length", "length": len(o.token_ids)}
    return {"type": "abort", "message": "Abort in waiting queue or running batch"}


def output(req: ProxyRequest, o: SampleOutput, rid: str, done: bool = True) -> JSON:
    """One sample's output dict; ``done=False`` for a stream event (the sample so far)."""
    meta: JSON = {
        "id": rid, "finish_reason": finish_reason(o) if done else None,
        "prompt_tokens": len(o.prompt_ids), "weight_version": "default",
        "completion_tokens": len(o.token_ids), "cached_tokens": o.cached_tokens or 0,
        "e2e_latency": o.latency_s,
    }
    if req.logprobs is not None:
        texts: Sequence[str | None] = (o.token_strs if req.text_in_logprobs and
                                       o.token_strs is not None else [None] * len(o.token_ids))
        meta["input_token_logprobs"] = []
        meta["output_token_logprobs"] = [
            [lp, t, s] for lp, t, s in zip(o.logprobs or (), o.token_ids, texts, strict=False)]
    out: JSON = {"text": o.text, "output_ids": list(o.token_ids), "meta_info": meta}
    if req.n > 1 or req.batch:
        out["index"] = o.index
    return out


def sample_rid(req: ProxyRequest, rid: str, index: int) -> str:
    return rid if req.num_samples == 1 else f"{rid}-{index}"


def response(req: ProxyRequest, outputs: Sequence[SampleOutput], rid: str) -> Any:
    """The whole answer: one output, or a list (n > 1, several prompts)."""
    outs = [output(req, o, sample_rid(req, rid, o.index)) for o in outputs]
    return outs if (req.n > 1 or req.batch) else outs[0]
