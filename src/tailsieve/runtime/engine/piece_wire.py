"""A piece on the wire: the request vLLM or SGLang takes for a ``PieceRequest`` (``piece_body``)
and a server's whole answer as the piece's outputs (``piece_outputs``); a streamed answer is
read by ``streamed``.

A piece's prompt is token ids (vLLM: ``prompt`` as a list of ids; SGLang: ``input_ids``), so a
turn continues on any replica exactly from its last seam; a piece without ids sends its chat
messages or its text. The server's count of cached prompt tokens is read where it reports one
(vLLM with ``--enable-prompt-tokens-details``: ``usage.prompt_tokens_details.cached_tokens``;
SGLang: ``meta_info.cached_tokens``).
"""

from __future__ import annotations

from typing import Any

from tailsieve.runtime.engine.backends import Backend, PromptInput, Response
from tailsieve.runtime.engine.faults import RequestError
from tailsieve.runtime.engine.pieces import PieceOutput, PieceRequest, piece_reason
from tailsieve.runtime.engine.transport import JSON
from tailsieve.runtime.engine.wire_bodies import build_request, parse_response


def piece_body(backend: Backend, model: str, piece: PieceRequest, stream: bool,
               stream_interval: int | None, return_token_ids: bool) -> JSON:
    """The request body of ``piece`` for ``model`` (SGLang: its ``rid``, the piece's request
    id; vLLM: its ``priority``, where it has one)."""
    ids: tuple[int, ...] = piece.prompt_ids  # (spliced as it is where ``EncodedIds``)
    prompt = (PromptInput(piece.request_id, token_ids=ids) if ids
              else PromptInput(piece.request_id, messages=piece.messages) if piece.messages
              else PromptInput(piece.request_id, text=piece.prompt_text))
    body = build_request(backend, model, prompt, piece.sampling, piece.num_samples,
                         forced_tokens=piece.max_tokens if piece.forced else None,
                         seed=piece.sampling.seed, return_token_ids=return_token_ids,
                         max_tokens=piece.max_tokens, stream=stream,
                         stream_interval=stream_interval)
    if backend is Backend.SGLANG:
        body["rid"] = piece.request_id
    elif piece.priority is not None:
        body["priority"] = piece.priority  # vLLM: --scheduling-policy priority
    return body


def piece_outputs(backend: Backend, raw: Any, num_samples: int, where: str,
                  need_ids: bool = True) -> list[PieceOutput]:
    """The ``num_samples`` outputs of a server's answer ``raw``, in sample order (their finish
    reasons read by ``piece_reason``); a ``RequestError`` where it is malformed, or
    ``need_ids`` and it came without token ids."""
    resps = parse_response(backend, raw, num_samples, where, allow_abort=True, keep_json=True)
    counts = _prompt_counts(raw, backend)  # the answer's, alike for each of its responses
    return [_output(r, counts, need_ids) for r in resps]


def _output(resp: Response, counts: tuple[int | None, int | None],
            need_ids: bool) -> PieceOutput:
    if resp.token_ids is None and need_ids:
        raise RequestError("a piece came back without token ids (vLLM: return_token_ids; "
                           "SGLang: output_ids)", retryable=False)
    reason = piece_reason(resp.finish_reason)
    pids = resp.prompt_token_ids
    prompt, cached = counts
    return PieceOutput(
        token_ids=resp.token_ids or (), finish_reason=reason, text=resp.text,
        num_tokens=None if resp.token_ids is not None else resp.num_tokens,
        logprobs=resp.logprobs, text_offsets=resp.text_offsets,
        num_cached_tokens=cached, num_prompt_tokens=prompt, token_texts=resp.token_texts,
        top_logprobs=resp.top_logprobs, stop_reason=resp.stop_reason,
        prompt_ids=pids or None,  # as parsed: ``EncodedIds`` keep the server's JSON of them
    )


def _prompt_counts(raw: Any, backend: Backend) -> tuple[int | None, int | None]:
    """Prompt tokens the server counted, and those it reports it found cached (None: not
    said)."""
    try:
        if backend is Backend.SGLANG:
            item = (raw[0] if isinstance(raw, list) else raw)["meta_info"]
            vals = item.get("prompt_tokens"), item.get("cached_tokens")
        else:
            usage = raw.get("usage") or {}
            details = usage.get("prompt_tokens_details") or {}
            vals = usage.get("prompt_tokens"), details.get("cached_tokens")
    except (KeyError, TypeError, AttributeError, IndexError):
        return None, None
    p, c = (int(v) if isinstance(v, int) and not isinstance(v, bool) else None for v in vals)
    return p, c
