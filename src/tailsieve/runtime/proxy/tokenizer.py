"""Prompts as token ids, from the servers' own ``POST /tokenize``.

A turn is sent to the servers as token ids so that it can be continued anywhere (see
``LiveExecutor.chat_as_tokens``): a text prompt is tokenized as vLLM's completions endpoint would
(``add_special_tokens`` as the request says, default true), chat messages under the model's
chat template with the request's template options (vLLM's chat endpoint applies the same
template, then generates as the completions endpoint does). ``HttpTokenizer`` asks a healthy
server, the next one on a fault; a server's 4xx (a prompt too long, a bad message) becomes the
client's HTTP 400 with the server's message.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from tailsieve.runtime.proxy.api_error import ApiError, bad_gateway, bad_request, unavailable
from tailsieve.runtime.transport import ReplicaDownError, RequestError, Transport


class Tokenizer(Protocol):
    """What turns a prompt into the servers' token ids."""

    async def tokenize(self, body: Mapping[str, Any]) -> tuple[int, ...]:
        """The ids of ``body`` (vLLM's ``/tokenize`` request: ``prompt`` or ``messages``
        with options, without ``model``)."""
        ...


class HttpTokenizer:
    """``Tokenizer`` over the servers' ``/tokenize`` (``healthy()``: which may be asked)."""

    def __init__(self, endpoints: Sequence[str], transport: Transport, model: str | None,
                 healthy: Callable[[], Sequence[bool]], timeout_s: float = 60.0) -> None:
        self.endpoints = list(endpoints)
        self._t = transport
        self.model = model
        self._healthy = healthy
        self._timeout_s = timeout_s
        self._next = itertools.count()

    async def tokenize(self, body: Mapping[str, Any]) -> tuple[int, ...]:
        req = dict(body)
        if self.model is not None:
            req["model"] = self.model
        ok = self._healthy()
        n = len(self.endpoints)
        start = next(self._next)
        errors: list[str] = []
        for k in range(n):
            r = (start + k) % n
            if not ok[r]:
                continue
            url = self.endpoints[r] + "/tokenize"
            try:
                out = await self._t.post_json(url, req, self._timeout_s)
            except ReplicaDownError as exc:
                errors.append(str(exc))
                continue
            except RequestError as exc:
                if exc.status in (404, 405):
                    raise bad_gateway(f"{url} has no /tokenize: send the prompt as token ids "
                                      "(input_ids, or a completions prompt of ids)") from None
                if exc.status is not None and 400 <= exc.status < 500:
                    raise ApiError(f"the server refused the prompt: {_server_message(exc)}",
                                   exc.status) from None
                errors.append(str(exc))
                continue
            return _tokens(url, out)
        if not errors:
            raise unavailable("no healthy server to tokenize the prompt")
        raise bad_gateway("tokenizing the prompt failed on every healthy server: "
                          + "; ".join(errors))


def _tokens(url: str, out: Any) -> tuple[int, ...]:
    tokens = out.get("tokens") if isinstance(out, dict) else None
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise bad_gateway(f"{url} answered without a 'tokens' list")
    if not tokens:
        raise bad_request("the prompt tokenizes to no tokens", "prompt")
    return tuple(tokens)


def _server_message(exc: RequestError) -> str:
    """The server's own error message out of a ``RequestError`` (its text otherwise)."""
    text = str(exc)
    i = text.find("{")
    if i >= 0:
        try:
            body = json.loads(text[i:])
            msg = body.get("error", {}).get("message") if isinstance(body, dict) else None
            if not msg and isinstance(body, dict):
                msg = body.get("message") or body.get("detail")
            if msg:
                return str(msg)
        except (ValueError, AttributeError):
            pass
    return text
