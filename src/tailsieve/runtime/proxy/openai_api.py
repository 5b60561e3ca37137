"""vLLM's OpenAI-compatible requests (``/v1/completions``, ``/v1/chat/completions``) parsed
into ``ProxyRequest``.

Sampling fields are vLLM's (``temperature``, ``top_p``, ``top_k``, ``min_p``, penalties,
``seed``, ``stop``, ``stop_token_ids``, ``ignore_eos``, ``min_tokens``, ...) and pass through
to the servers. What a continued piece could not keep is refused with HTTP 400 naming the
field: structured outputs (``response_format`` other than text, ``structured_outputs``,
``guided_*``, a forced ``tool_choice``), ``bad_words``, ``echo``, ``suffix``, beam search,
prompt logprobs and server-side prompt truncation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from tailsieve.runtime.proxy.api_error import bad_request
from tailsieve.runtime.proxy.request import (
    MAX_LOGPROBS,
    Api,
    PromptSpec,
    ProxyRequest,
    check_sampling,
    opt_bool,
    opt_int,
    token_id_list,
)

SAMPLING_FIELDS = (
    "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "seed", "stop", "stop_token_ids", "ignore_eos", "min_tokens",
    "skip_special_tokens", "spaces_between_special_tokens", "include_stop_str_in_output",
    "logit_bias", "allowed_token_ids", "return_tokens_as_token_ids", "priority", "cache_salt",
    "vllm_xargs", "stream_interval",
)  # fmt: skip
REFUSED = {
    "echo": "the proxy sends prompts as token ids and does not echo them",
    "suffix": "suffixes are not supported",
    "use_beam_search": "beam search cannot be continued in pieces",
    "prompt_logprobs": "prompt logprobs are not returned by the proxy",
    "structured_outputs": "structured outputs restart their grammar in a continued piece",
    "guided_json": "structured outputs restart their grammar in a continued piece",
    "guided_regex": "structured outputs restart their grammar in a continued piece",
    "guided_choice": "structured outputs restart their grammar in a continued piece",
    "guided_grammar": "structured outputs restart their grammar in a continued piece",
    "bad_words": "bad words depend on the tokens generated before a seam",
    "logits_processors": "custom logits processors are not supported",
    "truncate_prompt_tokens": "a continued piece's prompt would be truncated differently",
    "repetition_detection": "repetition detection depends on the tokens before a seam",
    "thinking_token_budget": "a thinking budget depends on the tokens before a seam",
}  # fmt: skip
CHAT_TOKENIZE_FIELDS = ("add_generation_prompt", "continue_final_message", "chat_template",
                        "chat_template_kwargs", "tools", "documents", "add_special_tokens")


def parse_completions(body: Any) -> ProxyRequest:
    """A ``/v1/completions`` body (prompt: a string, token ids, or a list of either)."""
    body = _object(body)
    _refuse(body)
    add_special = opt_bool(body, "add_special_tokens")
    prompts = _completion_prompts(body.get("prompt"), True if add_special is None else add_special)
    logprobs = opt_int(body, "logprobs", 0, MAX_LOGPROBS)
    return _request(Api.COMPLETIONS, body, prompts, logprobs,
                    opt_int(body, "max_tokens", 1, None))


def parse_chat(body: Any) -> ProxyRequest:
    """A ``/v1/chat/completions`` body: its messages go to the servers' ``/tokenize`` under
    the model's chat template (with the request's template options)."""
    body = _object(body)
    _refuse(body)
    choice = body.get("tool_choice")
    if choice not in (None, "none", "auto"):
        raise bad_request("tool_choice other than 'none' / 'auto' forces structured output, "
                          "which a continued piece would restart", "tool_choice")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise bad_request("'messages' must be a non-empty list", "messages")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise bad_request(f"messages[{i}] must be an object with a 'role'", "messages")
        _check_content(m.get("content"), i)
    tok: dict[str, Any] = {"messages": msgs, "add_generation_prompt": True}
    tok.update({k: body[k] for k in CHAT_TOKENIZE_FIELDS if body.get(k) is not None})
    logprobs = None
    if opt_bool(body, "logprobs"):
        logprobs = opt_int(body, "top_logprobs", 0, MAX_LOGPROBS) or 0
    elif body.get("top_logprobs"):
        raise bad_request("top_logprobs needs logprobs=true", "top_logprobs")
    max_tokens = opt_int(body, "max_completion_tokens", 1, None)
    if max_tokens is None:
        max_tokens = opt_int(body, "max_tokens", 1, None)
    req = _request(Api.CHAT, body, (PromptSpec(tokenize=tok),), logprobs, max_tokens)
    if body.get("max_completion_tokens") is not None:
        req = replace(req, max_tokens_param="max_completion_tokens")
    return req


def _check_content(content: Any, i: int) -> None:
    """A message's content: a string, a list of content parts (objects with a 'type') or
    none (an assistant message with tool calls)."""
    if content is None or isinstance(content, str):
        return
    if isinstance(content, list) and all(
            isinstance(p, dict) and isinstance(p.get("type"), str) for p in content):
        return
    got = ("a list with something other than parts" if isinstance(content, list) else
           "an object" if isinstance(content, dict) else type(content).__name__)
    raise bad_request(f"messages[{i}].content must be a string or a list of content parts "
                      f"(objects with a 'type'), got {got}", "messages", reason="bad_content")


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    return body


def _refuse(body: Mapping[str, Any]) -> None:
    for key, why in REFUSED.items():
        v = body.get(key)
        if v is not None and v is not False and v != [] and v != {}:
            raise bad_request(f"'{key}' is not supported by the TailSieve proxy: {why}", key)
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise bad_request("'response_format' other than text is not supported by the "
                          "TailSieve proxy: structured outputs restart their grammar in a "
                          "continued piece", "response_format")
    best_of = opt_int(body, "best_of", 1, None)
    if best_of is not None and best_of != (body.get("n") or 1):
        raise bad_request("best_of other than n is not supported", "best_of")


def _completion_prompts(prompt: Any, add_special: bool) -> tuple[PromptSpec, ...]:
    if isinstance(prompt, str):
        return (_text(prompt, add_special),)
    if isinstance(prompt, list) and prompt:
        first = prompt[0]
        if isinstance(first, int) and not isinstance(first, bool):
            return (PromptSpec(token_ids=token_id_list(prompt, "prompt")),)
        if all(isinstance(x, str) for x in prompt):
            return tuple(_text(x, add_special) for x in prompt)
        if all(isinstance(x, list) for x in prompt):
            return tuple(PromptSpec(token_ids=token_id_list(x, "prompt")) for x in prompt)
    raise bad_request("'prompt' must be a string, a list of token ids, or a non-empty list of "
                      "either", "prompt")


def _text(text: str, add_special: bool) -> PromptSpec:
    if not text:
        raise bad_request("'prompt' must not be empty", "prompt")
    return PromptSpec(tokenize={"prompt": text, "add_special_tokens": add_special})


def _request(api: Api, body: Mapping[str, Any], prompts: tuple[PromptSpec, ...],
             logprobs: int | None, max_tokens: int | None) -> ProxyRequest:
    sampling = {k: body[k] for k in SAMPLING_FIELDS if body.get(k) is not None}
    check_sampling(sampling)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad_request("'model' must be a string", "model")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise bad_request("'stream_options' must be an object", "stream_options")
    stream = bool(opt_bool(body, "stream"))
    key = body.get("session_id") or body.get("user")
    rid = body.get("request_id")
    return ProxyRequest(
        api=api, prompts=prompts, sampling=sampling, max_tokens=max_tokens,
        n=opt_int(body, "n", 1, None) or 1, model=model, stream=stream,
        include_usage=stream and bool(opts.get("include_usage")), logprobs=logprobs,
        return_token_ids=bool(opt_bool(body, "return_token_ids")),
        rid=str(rid) if rid is not None else None,
        body_key=str(key) if key else None,
    )
