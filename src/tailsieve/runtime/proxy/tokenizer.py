"""Prompts as token ids, from the servers' own ``POST /tokenize``.

A turn is sent to the servers as token ids so that it can be continued anywhere (see
``LiveExecutor.chat_as_tokens``): a text prompt is tokenized as vLLM's completions endpoint would
(``add_special_tokens`` as the request says, default true), chat messages under the model's
chat template with the request's template options (vLLM's chat endpoint applies the same
template, then generates as the completions endpoint does). ``HttpTokenizer`` asks a healthy
server through the engine client (``HttpPieceRunner.tokenize`` / ``tokenize_chat``), the next
one on a fault; a server's 4xx (a prompt too long, a bad message) becomes the client's HTTP 400
with the server's message.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from tailsieve.runtime.engine.http_runner import HttpPieceRunner
from tailsieve.runtime.engine.transport import ReplicaDownError, RequestError
from tailsieve.runtime.proxy.api_error import ApiError, bad_gateway, bad_request, unavailable


class Tokenizer(Protocol):
    """What turns a prompt into the servers' token ids."""

    async def tokenize(self, body: Mapping[str, Any]) -> tuple[int, ...]:
        """The ids of ``body`` (vLLM's ``/tokenize`` request: ``prompt`` or ``messages``
        with options, without ``model``)."""
        ...


class HttpTokenizer:
    """``Tokenizer`` over ``runner``'s servers (``healthy()``: which may be asked)."""

    def __init__(self, runner: HttpPieceRunner, healthy: Callable[[], Sequence[bool]]) -> None:
        self.runner = runner
        self._healthy = healthy
        self._next = itertools.count()

    async def tokenize(self, body: Mapping[str, Any]) -> tuple[int, ...]:
        ok = self._healthy()
        n = len(self.runner.endpoints)
        start = next(self._next)
        errors: list[str] = []
        for k in range(n):
            r = (start + k) % n
            if not ok[r]:
                continue
            try:
                tokens = await self._ask(r, body)
            except ReplicaDownError as exc:
                errors.append(str(exc))
                continue
            except RequestError as exc:
                if exc.status in (404, 405):
                    raise bad_gateway(f"{self.runner.endpoints[r]} has no /tokenize: send the "
                                      "prompt as token ids (input_ids, or a completions prompt "
                                      "of ids)") from None
                if exc.status is not None and 400 <= exc.status < 500:
                    raise ApiError("the server refused the prompt: "
                                   f"{exc.server_message or exc}", exc.status) from None
                errors.append(str(exc))
                continue
            if not tokens:
                raise bad_request("the prompt tokenizes to no tokens", "prompt")
            return tokens
        if not errors:
            raise unavailable("no healthy server to tokenize the prompt")
        raise bad_gateway("tokenizing the prompt failed on every healthy server: "
                          + "; ".join(errors))

    async def _ask(self, replica: int, body: Mapping[str, Any]) -> tuple[int, ...]:
        if "messages" in body:
            options = {k: v for k, v in body.items() if k != "messages"}
            return await self.runner.tokenize_chat(body["messages"], replica, options)
        return await self.runner.tokenize(body["prompt"], replica,
                                          body.get("add_special_tokens", True))
