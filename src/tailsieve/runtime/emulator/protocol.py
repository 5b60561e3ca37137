"""OpenAI/vLLM request parsing for the emulator: a body validated into a ``GenRequest``.

Token counts are what matter: a prompt string counts one token per whitespace-separated word
(at least 1), a token-id list counts its length, a chat request counts its words plus 5
ChatML tokens per message plus 3 (as the real CPU server's tiny model does for "hello": 9).
The response JSON (the filler tokens every answer carries) is ``emulator.responses``; SGLang's
``emulator.sglang`` parses ``/generate`` with the helpers here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

CHAT_TEMPLATE_TOKENS = 5  # tokens a ChatML template adds per message
CHAT_GENERATION_PROMPT_TOKENS = 3  # "<|im_start|>assistant\n"
PROMPT_TOKEN_ID = 7  # token id reported for prompt tokens given as text
_ID_WORD = re.compile(r"t[0-9]{1,9}")  # a text word that names its token id

Kind = Literal["completion", "chat"]


class BadRequest(Exception):
    """A request the server rejects; carries the HTTP status and vLLM error type."""

    def __init__(
        self,
        message: str,
        status: int = 400,
        err_type: str = "BadRequestError",
        param: str | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.err_type = err_type
        self.param = param


def error_body(
    message: str, err_type: str, status: int, param: str | None = None
) -> dict[str, Any]:
    """vLLM's ``ErrorResponse`` JSON."""
    return {"error": {"message": message, "type": err_type, "param": param, "code": status}}


@dataclass(frozen=True, slots=True)
class GenRequest:
    """A validated /v1/completions or /v1/chat/completions request."""

    kind: Kind
    prompt_tokens: tuple[int, ...]  # token count of each prompt (one per prompt in a batch)
    prompt_ids: tuple[tuple[int, ...], ...]  # token ids of each prompt
    n: int  # sequences per prompt
    max_tokens: int  # cap on generated tokens per sequence
    min_tokens: int  # floor on drawn lengths (vLLM's min_tokens), tokens
    ignore_eos: bool  # True: every sequence produces exactly max_tokens
    seed: int | None  # per-request seed for the drawn lengths
    stream: bool
    include_usage: bool  # stream_options.include_usage
    logprobs: int | None  # None: no logprobs; k: logprobs with k alternatives
    return_token_ids: bool  # add token_ids / prompt_token_ids to each choice
    stream_interval: int = 1  # streamed tokens per chunk (vLLM's stream_interval)
    priority: int = 0  # vLLM's per-request priority (lower first; --scheduling-policy priority)


def _opt_int(body: dict[str, Any], key: str, lo: int | None = None,
             prefix: str = "") -> int | None:
    """``body[key]`` as an integer (None when absent); ``prefix`` names its object in errors."""
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadRequest(f"'{prefix}{key}' must be an integer, got {v!r}")
    if lo is not None and v < lo:
        raise BadRequest(f"'{prefix}{key}' must be >= {lo}, got {v}")
    return v


def _opt_number(body: dict[str, Any], key: str) -> None:
    v = body.get(key)
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
        raise BadRequest(f"'{key}' must be a number, got {v!r}")


def text_ids(text: str) -> tuple[int, ...]:
    """The token ids the emulator gives a text prompt: ``PROMPT_TOKEN_ID`` per word (a client
    that must send token ids, e.g. to continue a response, sends these for the same prompt),
    except that a word ``t<N>`` (``t`` and 1-9 digits) is token id N: a client behind a router
    that takes only text prompts (smg) still sends distinct prompts that the prefix cache
    knows, and ``t42`` words stand for generated tokens (``responses.FILLER_TOKEN_ID``)."""
    words = text.split()
    if not words:
        return (PROMPT_TOKEN_ID,)
    return tuple(int(w[1:]) if _ID_WORD.fullmatch(w) else PROMPT_TOKEN_ID for w in words)


def _prompt_ids(prompt: Any) -> tuple[tuple[int, ...], ...]:
    """Token ids of each prompt (text prompts get ``PROMPT_TOKEN_ID`` per word)."""
    if isinstance(prompt, str):
        return (text_ids(prompt),)
    if isinstance(prompt, list) and prompt:
        if all(isinstance(x, int) and not isinstance(x, bool) for x in prompt):
            return (tuple(prompt),)
        if all(isinstance(x, str) for x in prompt):
            return tuple(text_ids(x) for x in prompt)
        if all(isinstance(x, list) and x and all(isinstance(t, int) for t in x) for x in prompt):
            return tuple(tuple(x) for x in prompt)
    raise BadRequest("'prompt' must be a string, a list of token ids, or a list of those")


def _chat_ids(messages: Any) -> tuple[tuple[int, ...], ...]:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    total = CHAT_GENERATION_PROMPT_TOKENS
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m:
            raise BadRequest(f"messages[{i}] must be an object with 'role' and 'content'")
        content = m.get("content") or ""
        if isinstance(content, list):  # content parts
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        total += len(str(content).split()) + CHAT_TEMPLATE_TOKENS
    return ((PROMPT_TOKEN_ID,) * total,)


def tokenize_ids(body: dict[str, Any]) -> tuple[int, ...]:
    """The ids of a ``/tokenize`` body: its ``messages`` as the chat endpoint sees them, or
    its ``prompt`` as the completions endpoint does."""
    if "messages" in body:
        return _chat_ids(body["messages"])[0]
    if "prompt" in body and isinstance(body["prompt"], str):
        return text_ids(body["prompt"])
    raise BadRequest("give 'prompt' (a string) or 'messages'")


def parse_request(body: Any, kind: Kind, model_name: str, max_model_len: int) -> GenRequest:
    """Validate a request body like vLLM does (the subset the emulator needs)."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    model = body.get("model")
    if model is not None and model != model_name:
        raise BadRequest(
            f"The model `{model}` does not exist. Valid aliases: {model_name}.",
            404,
            "NotFoundError",
            param="model",
        )
    if kind == "chat":
        ids = _chat_ids(body.get("messages"))
    elif "prompt" not in body:
        raise BadRequest("'prompt' is required")
    else:
        ids = _prompt_ids(body["prompt"])
    counts = tuple(len(x) for x in ids)
    n = _opt_int(body, "n", lo=1) or 1
    max_tokens = _opt_int(body, "max_tokens", lo=1)
    if kind == "chat" and max_tokens is None:
        max_tokens = _opt_int(body, "max_completion_tokens", lo=1)
    longest = max(counts)
    if longest >= max_model_len:
        raise BadRequest(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"request has {longest} input tokens. Please reduce the length of the input messages."
        )
    if max_tokens is None:
        max_tokens = 16 if kind == "completion" else max_model_len - longest
    if max_tokens > max_model_len:
        raise BadRequest(
            f"max_tokens={max_tokens} cannot be greater than "
            f"max_model_len={max_model_len}. Please request fewer output tokens."
        )
    for key in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
        _opt_number(body, key)
    _opt_int(body, "top_k")
    seed = _opt_int(body, "seed")
    stop = body.get("stop")
    if stop is not None and not isinstance(stop, (str, list)):
        raise BadRequest("'stop' must be a string or a list of strings")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise BadRequest("'stream_options' must be an object")
    return GenRequest(
        kind=kind,
        prompt_tokens=counts,
        prompt_ids=ids,
        n=n,
        max_tokens=max_tokens,
        min_tokens=min(_opt_int(body, "min_tokens", lo=0) or 0, max_tokens),
        ignore_eos=bool(body.get("ignore_eos", False)),
        seed=seed,
        stream=bool(body.get("stream", False)),
        include_usage=bool(opts.get("include_usage", False)),
        logprobs=_logprobs(body, kind),
        return_token_ids=bool(body.get("return_token_ids", False)),
        stream_interval=_opt_int(body, "stream_interval", lo=1) or 1,
        priority=_opt_int(body, "priority") or 0,
    )


def _logprobs(body: dict[str, Any], kind: Kind) -> int | None:
    if kind == "completion":
        return _opt_int(body, "logprobs", lo=0)
    if body.get("logprobs"):
        return _opt_int(body, "top_logprobs", lo=0) or 0
    return None
