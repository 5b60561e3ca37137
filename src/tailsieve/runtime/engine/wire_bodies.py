"""Request building and response parsing for the supported inference servers: the engines'
wire bodies of a whole request, used by ``piece_wire`` (a piece's request and answer) and
``streamed`` (a streamed chunk's token detail and stop reason).

- ``vllm``: OpenAI-compatible ``/v1/completions`` (text or token-id prompt).
- ``vllm-chat``: OpenAI-compatible ``/v1/chat/completions`` (chat messages).
- ``sglang``: SGLang native ``/generate`` (``text`` or ``input_ids`` + ``sampling_params``).

A request carries ``num_samples`` responses (OpenAI ``n`` / SGLang ``sampling_params.n``).
Parsing returns one ``Response`` per sample with its generated-token count taken from the
server's own accounting (token ids, logprob entries, or ``usage.completion_tokens`` when a
request carries one sample). The data types (``Backend``, ``SamplingParams``, ``PromptInput``,
``Response``) are ``backends``.
"""

from __future__ import annotations

from array import array
from typing import Any

from tailsieve.errors import ConfigError
from tailsieve.runtime.engine.backends import (
    Backend,
    EncodedIds,
    PromptInput,
    Response,
    SamplingParams,
)
from tailsieve.runtime.engine.faults import engine_abort
from tailsieve.runtime.engine.transport import JSON, RequestError


def build_request(
    backend: Backend,
    model: str,
    prompt: PromptInput,
    sampling: SamplingParams,
    num_samples: int,
    forced_tokens: int | None = None,
    seed: int | None = None,
    stream: bool = False,
    return_token_ids: bool = True,
    max_tokens: int | None = None,
    stream_interval: int | None = None,
) -> JSON:
    """The JSON body of one request. ``forced_tokens``: replay mode (max_tokens = L, ignore_eos).
    ``return_token_ids=False`` skips per-choice token ids when ``usage`` already gives the exact
    count (one sample per request), which makes responses much smaller to parse.
    ``max_tokens`` overrides ``sampling.max_tokens`` (a continued piece's cap).
    ``stream_interval``: streamed vLLM requests send their tokens in chunks of this many
    (vLLM's per-request ``stream_interval``; the first and the last chunk come at once)."""
    if forced_tokens is not None:
        max_tokens = forced_tokens
    elif max_tokens is None:
        max_tokens = sampling.max_tokens
    if backend is Backend.SGLANG:
        return _sglang_request(
            prompt, sampling, num_samples, max_tokens, forced_tokens, seed, stream
        )
    return _openai_request(
        backend,
        model,
        prompt,
        sampling,
        num_samples,
        max_tokens,
        forced_tokens,
        seed,
        stream,
        return_token_ids,
        stream_interval,
    )


def _openai_request(
    backend: Backend,
    model: str,
    prompt: PromptInput,
    sampling: SamplingParams,
    num_samples: int,
    max_tokens: int,
    forced_tokens: int | None,
    seed: int | None,
    stream: bool,
    return_token_ids: bool,
    stream_interval: int | None = None,
) -> JSON:
    body: JSON = {"model": model, "max_tokens": max_tokens, "n": num_samples}
    if backend is Backend.VLLM_CHAT:
        if prompt.messages is None:
            content = prompt.text if prompt.text is not None else None
            if content is None:
                raise ConfigError(f"prompt {prompt.prompt_id!r}: chat backend needs text/messages")
            body["messages"] = [{"role": "user", "content": content}]
        else:
            body["messages"] = [dict(m) for m in prompt.messages]
        if sampling.logprobs is not None:
            body["logprobs"] = True
            body["top_logprobs"] = sampling.logprobs
    else:
        if prompt.messages is not None:
            raise ConfigError(f"prompt {prompt.prompt_id!r}: chat messages need backend vllm-chat")
        ids = prompt.token_ids
        body["prompt"] = (
            ids if isinstance(ids, EncodedIds) else list(ids) if ids is not None else prompt.text
        )
        if sampling.logprobs is not None:
            body["logprobs"] = sampling.logprobs
    if return_token_ids or num_samples > 1:
        body["return_token_ids"] = True  # vLLM >= 0.10: per-choice token ids (exact counts)
    for key in ("temperature", "top_p", "top_k", "presence_penalty"):
        val = getattr(sampling, key)
        if val is not None:
            body[key] = val
    if seed is not None:
        body["seed"] = seed
    if sampling.stop:
        body["stop"] = list(sampling.stop)
    if forced_tokens is not None:
        body["ignore_eos"] = True
        body["min_tokens"] = forced_tokens
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        if stream_interval is not None and stream_interval > 1:
            body["stream_interval"] = stream_interval
    body.update(sampling.extra)
    return body


def _sglang_request(
    prompt: PromptInput,
    sampling: SamplingParams,
    n: int,
    max_tokens: int,
    forced: int | None,
    seed: int | None,
    stream: bool,
) -> JSON:
    sp: JSON = {"max_new_tokens": max_tokens, "n": n}
    for key in ("temperature", "top_p", "top_k", "presence_penalty"):
        val = getattr(sampling, key)
        if val is not None:
            sp[key] = val
    if sampling.stop:
        sp["stop"] = list(sampling.stop)
    if seed is not None:
        sp["sampling_seed"] = seed
    if forced is not None:
        sp["ignore_eos"] = True
        sp["min_new_tokens"] = forced
    sp.update(sampling.extra)
    body: JSON = {"sampling_params": sp, "stream": stream}
    if prompt.token_ids is not None:
        ids = prompt.token_ids
        body["input_ids"] = ids if isinstance(ids, EncodedIds) else list(ids)
    elif prompt.text is not None:
        body["text"] = prompt.text
    else:
        raise ConfigError(f"prompt {prompt.prompt_id!r}: sglang /generate needs text or token ids")
    if sampling.logprobs is not None:
        body["return_logprob"] = True
    return body


def parse_response(
    backend: Backend, body: Any, num_samples: int, where: str, allow_abort: bool = False,
    keep_json: bool = False,
) -> list[Response]:
    """Responses of one non-streaming request, in sample order. Raises ``RequestError`` on a
    body that does not have the expected shape (counts as malformed, retried). SGLang:
    ``allow_abort`` returns an aborted request's partial output (finish reason "abort"); an
    abort for a reason of the request raises as ``faults.engine_abort`` says. ``keep_json``: token ids decoded by ``ids_json`` keep their JSON text (``EncodedIds``)."""
    try:
        if backend is Backend.SGLANG:
            out = _parse_sglang(body, where, allow_abort, keep_json)
        else:
            out = _parse_openai(backend, body, num_samples, keep_json)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise RequestError(f"{where}: unexpected response shape ({exc!r})") from exc
    if len(out) != num_samples:
        raise RequestError(f"{where}: expected {num_samples} responses, got {len(out)}")
    return out


def _int_tuple(values: Any, keep_json: bool = False) -> tuple[int, ...]:
    """Token ids as a tuple, checked to be integers at C speed (``array`` raises TypeError on
    anything else). The per-element ``int()`` this replaces was most of the router's CPU. A
    tuple is taken as checked: JSON decodes arrays as lists, ``ids_json`` decodes id arrays as
    tuples of ints it parsed itself (``EncodedIds`` with the server's JSON text of them, kept
    when ``keep_json``: a continued piece sends them back)."""
    cls = values.__class__
    if cls is tuple:
        return values
    if cls is EncodedIds:  # ids_json keeps the server's JSON of the ids alongside
        return values if keep_json else tuple(values)
    if not isinstance(values, list | tuple):
        raise TypeError(f"token ids must be a list, got {type(values).__name__}")
    array("q", values)
    return tuple(values)


def _parse_openai(backend: Backend, body: Any, n: int, keep_json: bool = False) -> list[Response]:
    choices = sorted(body["choices"], key=lambda c: int(c.get("index", 0)))
    usage = body.get("usage") or {}
    top_pids = body.get("prompt_token_ids")  # chat completions: once per request
    out: list[Response] = []
    for ch in choices:
        if backend is Backend.VLLM_CHAT:
            text = (ch.get("message") or {}).get("content") or ""
            lp = ch.get("logprobs") or {}
            content = lp.get("content") if isinstance(lp, dict) else None
            logprobs = tuple(float(e["logprob"]) for e in content) if content else None
            offsets = None
        else:
            text = ch.get("text") or ""
            lp = ch.get("logprobs") or {}
            vals = lp.get("token_logprobs") if isinstance(lp, dict) else None
            logprobs = tuple(float(v) for v in vals if v is not None) if vals else None
            offs = lp.get("text_offset") if isinstance(lp, dict) else None
            offsets = _int_tuple(offs) if offs else None
        texts, tops = token_detail(lp)
        ids = ch.get("token_ids")
        pids = ch.get("prompt_token_ids", top_pids)
        token_ids = _int_tuple(ids, keep_json) if ids is not None else None
        if token_ids is not None:
            num = len(token_ids)
        elif logprobs is not None:
            num = len(logprobs)
        elif n == 1 and "completion_tokens" in usage:
            num = int(usage["completion_tokens"])
        else:
            raise ValueError("no per-choice token count (token_ids / logprobs / usage)")
        out.append(
            Response(
                text=text,
                num_tokens=num,
                finish_reason=str(ch.get("finish_reason") or "unknown"),
                token_ids=token_ids,
                logprobs=logprobs,
                text_offsets=offsets,
                prompt_token_ids=_int_tuple(pids, keep_json) if pids is not None else None,
                token_texts=texts,
                top_logprobs=tops,
                stop_reason=stop_value(ch.get("stop_reason")),
            )
        )
    return out


def token_detail(lp: Any) -> tuple[tuple[str, ...] | None, tuple[Any, ...] | None]:
    """Each token's text and alternatives from a completions choice's ``logprobs`` (None where
    the server gave none: not asked, or a chat answer)."""
    toks = lp.get("tokens") if isinstance(lp, dict) else None
    tops = lp.get("top_logprobs") if isinstance(lp, dict) else None
    return (tuple(toks) if isinstance(toks, list) else None,
            tuple(tops) if isinstance(tops, list) else None)


def matched_stop(finish_reason: Any) -> int | str | None:
    """The stop string or token id an SGLang ``meta_info.finish_reason`` says ended it."""
    return stop_value(finish_reason.get("matched")) if isinstance(finish_reason, dict) else None


def stop_value(value: Any) -> int | str | None:
    """A server's stop reason as given, if it is one (a stop string or token id)."""
    return value if isinstance(value, int | str) else None


def _parse_sglang(
    body: Any, where: str, allow_abort: bool = False, keep_json: bool = False
) -> list[Response]:
    items = body if isinstance(body, list) else [body]
    out: list[Response] = []
    for it in items:
        meta = it["meta_info"]
        fr = meta.get("finish_reason")
        engine_abort(where, fr)
        reason = fr.get("type", "unknown") if isinstance(fr, dict) else str(fr or "unknown")
        if reason == "abort" and not allow_abort:  # aborted by someone else: never delivered
            raise ValueError(f"request aborted by the server: {fr}")
        ids = it.get("output_ids")
        lps = meta.get("output_token_logprobs")
        if ids is None and lps:
            ids = [e[1] for e in lps]  # [logprob, token_id, text] per generated token
        out.append(
            Response(
                text=it.get("text") or "",
                num_tokens=int(meta["completion_tokens"]),
                finish_reason=reason,
                token_ids=_int_tuple(ids, keep_json) if ids is not None else None,
                logprobs=tuple(float(e[0]) for e in lps) if lps else None,
                stop_reason=matched_stop(fr),
            )
        )
    return out
