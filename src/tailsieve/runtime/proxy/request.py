"""A client request as the proxy runs it, whichever API it came on.

``openai_api.parse_completions`` / ``parse_chat`` and ``sglang_api.parse_generate`` turn a
request body into a ``ProxyRequest``: its prompts (token ids, or what the servers'
``/tokenize`` needs to make them), its sampling in vLLM's field names, ``n``, and what the
answer must carry. Values are checked here, so that a bad request gets an HTTP 400 that names
the field before anything is sent to a server.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tailsieve.runtime.proxy.api_error import bad_request

MAX_LOGPROBS = 20  # vLLM's default --max-logprobs
MAX_N = 1024  # samples per prompt one request may ask for


class Api(StrEnum):
    """The route a request came on."""

    COMPLETIONS = "completions"  # vLLM's /v1/completions
    CHAT = "chat"  # vLLM's /v1/chat/completions
    GENERATE = "generate"  # SGLang's /generate


@dataclass(frozen=True, slots=True)
class PromptSpec:
    """One prompt: its token ids, or the ``/tokenize`` body that gives them."""

    token_ids: tuple[int, ...] | None = None
    tokenize: Mapping[str, Any] | None = None  # {"prompt": text, ...} or {"messages": ...}

    def __post_init__(self) -> None:
        if (self.token_ids is None) == (self.tokenize is None):
            raise bad_request("a prompt needs exactly one of token ids or text")
        if self.token_ids is not None and not self.token_ids:
            raise bad_request("a prompt must not be empty")


@dataclass(frozen=True, slots=True)
class ProxyRequest:
    """A generation request: ``n`` samples of each prompt."""

    api: Api
    prompts: tuple[PromptSpec, ...]
    sampling: Mapping[str, Any]  # vLLM-named sampling fields, without max_tokens / logprobs
    max_tokens: int | None = None  # per sample (None: the API's default, see ``default_max``)
    max_tokens_param: str = "max_tokens"  # what the request called it (its errors name it)
    n: int = 1
    model: str | None = None
    stream: bool = False
    include_usage: bool = False  # OpenAI stream_options.include_usage
    logprobs: int | None = None  # alternatives per token (0: the sampled token's only; None: no
    # logprobs)
    return_token_ids: bool = False  # vLLM: token ids in each choice
    rid: str | None = None  # the client's request id (SGLang rid, vLLM request_id): abort by it
    body_key: str | None = None  # a session key the body carries (session_id, user)
    batch: bool = False  # the prompts came as a list (SGLang answers a list)
    text_in_logprobs: bool = False  # SGLang return_text_in_logprobs
    extra: Mapping[str, Any] = field(default_factory=dict)  # API-specific answer options

    def __post_init__(self) -> None:
        if not self.prompts:
            raise bad_request("no prompt given", "prompt")
        if not 1 <= self.n <= MAX_N:
            raise bad_request(f"n must be in 1..{MAX_N}, got {self.n}", "n")

    @property
    def num_samples(self) -> int:
        return len(self.prompts) * self.n

    @property
    def stop(self) -> tuple[str, ...]:
        stop = self.sampling.get("stop")
        return tuple(stop) if stop else ()


def default_max(api: Api, prompt_tokens: int, max_model_len: int | None) -> int:
    """The token cap of a request that gives none: vLLM's completions 16, chat the rest of
    the context, SGLang 128."""
    if api is Api.COMPLETIONS:
        return 16
    if api is Api.GENERATE:
        return 128
    if max_model_len is None:
        raise bad_request("give max_tokens (the servers' context length is unknown)",
                          "max_tokens")
    return max(1, max_model_len - prompt_tokens)


def fit_context(prompt_tokens: int, max_tokens: int, max_model_len: int | None,
                param: str = "max_tokens") -> int:
    """``max_tokens`` within the model's context, as vLLM does: HTTP 400 in its words when
    ``max_tokens`` (named ``param`` in the request) exceeds the context or the prompt fills it,
    else cut to the room the prompt leaves (nothing is checked when the length is unknown)."""
    if max_model_len is None:
        return max_tokens
    if max_tokens > max_model_len:
        raise bad_request(f"{param}={max_tokens} cannot be greater than max_model_len="
                          f"{max_model_len}. Please request fewer output tokens.", param,
                          reason="context_length")
    if prompt_tokens >= max_model_len:
        raise bad_request(f"This model's maximum context length is {max_model_len} tokens. "
                          f"However, your prompt contains {prompt_tokens} input tokens, which "
                          "exceeds this limit even without any output tokens. Please reduce "
                          "the length of the input prompt.", "input_tokens",
                          reason="context_length")
    return min(max_tokens, max_model_len - prompt_tokens)


# ----- field checks shared by the parsers ---------------------------------------------------

def opt_int(body: Mapping[str, Any], key: str, lo: int | None = None, hi: int | None = None,
            where: str = "") -> int | None:
    """``body[key]`` as an int in [lo, hi], or None when absent."""
    v = body.get(key)
    if v is None:
        return None
    name = where + key
    if isinstance(v, bool) or not isinstance(v, int):
        raise bad_request(f"'{name}' must be an integer, got {v!r}", name)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        rng = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
        raise bad_request(f"'{name}' must be in {rng}, got {v}", name)
    return v


def opt_float(body: Mapping[str, Any], key: str, lo: float | None = None,
              hi: float | None = None, lo_open: bool = False, where: str = "") -> float | None:
    """``body[key]`` as a finite number in the range, or None when absent."""
    v = body.get(key)
    if v is None:
        return None
    name = where + key
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise bad_request(f"'{name}' must be a finite number, got {v!r}", name)
    too_low = lo is not None and (v <= lo if lo_open else v < lo)
    if too_low or (hi is not None and v > hi):
        left = "(" if lo_open else "["
        raise bad_request(f"'{name}' must be in {left}{lo}, {hi}], got {v}", name)
    return float(v)


def opt_bool(body: Mapping[str, Any], key: str, where: str = "") -> bool | None:
    v = body.get(key)
    if v is None:
        return None
    if not isinstance(v, bool):
        raise bad_request(f"'{where + key}' must be true or false, got {v!r}", where + key)
    return v


def stop_strings(body: Mapping[str, Any], key: str = "stop", where: str = "") -> list[str] | None:
    """``stop`` as a list of non-empty strings (a string is one), or None."""
    v = body.get(key)
    if v is None or v == [] or v == "":
        return None
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(s, str) and s for s in v):
        raise bad_request(f"'{where + key}' must be a string or a list of non-empty strings",
                          where + key)
    return list(v)


def token_id_list(v: Any, name: str) -> tuple[int, ...]:
    """A non-empty list of token ids (integers >= 0), checked at C speed."""
    try:
        if not isinstance(v, list) or not v or min(array("q", v)) < 0:
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise bad_request(f"'{name}' must be a non-empty list of token ids (integers >= 0)",
                          name) from None
    return tuple(v)


def check_sampling(sp: dict[str, Any], where: str = "") -> None:
    """The sampling values every API shares, checked in place (vLLM's ranges)."""
    opt_float(sp, "temperature", 0.0, None, where=where)
    opt_float(sp, "top_p", 0.0, 1.0, lo_open=True, where=where)
    top_k = opt_int(sp, "top_k", -1, None, where=where)
    if top_k is not None and top_k < 1:
        sp.pop("top_k")  # -1 / 0: disabled, vLLM's default
    opt_float(sp, "min_p", 0.0, 1.0, where=where)
    opt_float(sp, "presence_penalty", -2.0, 2.0, where=where)
    opt_float(sp, "frequency_penalty", -2.0, 2.0, where=where)
    opt_float(sp, "repetition_penalty", 0.0, 2.0, lo_open=True, where=where)
    opt_int(sp, "seed", None, None, where=where)
    opt_int(sp, "min_tokens", 0, None, where=where)
    for key in ("ignore_eos", "skip_special_tokens", "spaces_between_special_tokens",
                "include_stop_str_in_output"):
        opt_bool(sp, key, where=where)
    ids = sp.get("stop_token_ids")
    if ids is not None and ids != []:
        token_id_list(ids, where + "stop_token_ids")
    stop = stop_strings(sp, where=where)
    if stop is None:
        sp.pop("stop", None)
    else:
        sp["stop"] = stop
