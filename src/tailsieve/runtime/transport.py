"""The HTTP seam of the live runtime: one small protocol, one aiohttp implementation.

Everything that talks to a replica goes through a ``Transport``; tests swap in a stub. Errors are
classified here, once, into what the executor acts on:

- ``ReplicaDownError``: connection refused / reset / closed mid-request, a timeout, HTTP 503, or
  vLLM's HTTP 500 for a dead engine (``EngineDeadError``: the API server outlived its
  EngineCore process and shuts down next). The replica is treated as dead: its in-flight groups are regenerated elsewhere.
- ``RequestError``: the replica answered, but badly (HTTP 5xx, malformed JSON). Retried with
  backoff; ``retryable`` is False for HTTP 4xx (a client bug that retrying cannot fix).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

import aiohttp

from tailsieve.errors import ReplicaError

JSON = dict[str, Any]


class ReplicaDownError(ReplicaError):
    """The replica cannot be reached or stopped answering (refused, reset, timeout)."""


class RequestError(ReplicaError):
    """The replica answered with an error or with something that is not the expected JSON."""

    def __init__(self, message: str, status: int | None = None, retryable: bool = True) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable


@runtime_checkable
class Transport(Protocol):
    """Minimal async HTTP client used by the executor (swap for a stub in tests)."""

    async def post_json(self, url: str, payload: JSON, timeout_s: float | None) -> Any:
        """POST ``payload`` as JSON, return the decoded JSON body (dict or list; None for an
        empty body).

        Raises ``ReplicaDownError`` or ``RequestError``. Cancelling the awaiting task must
        close the connection (that is how a request is aborted on the server)."""
        ...

    def stream_json(self, url: str, payload: JSON, timeout_s: float | None) -> AsyncIterator[JSON]:
        """POST and yield each server-sent-event ``data:`` object until ``[DONE]``."""
        ...

    async def get(self, url: str, timeout_s: float | None) -> tuple[int, str]:
        """GET, return (status, body text). Raises ``ReplicaDownError`` when unreachable."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


def _classify(url: str, exc: BaseException) -> ReplicaError:
    if isinstance(exc, ReplicaError):
        return exc
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return ReplicaDownError(f"{url}: timed out")
    return ReplicaDownError(f"{url}: {type(exc).__name__}: {exc}")


ENGINE_DEAD_MARKERS = ("EngineCore encountered an issue", "EngineDeadError")
"""Text of vLLM's ``EngineDeadError`` (``vllm/v1/engine/exceptions.py``), sent as HTTP 500."""


def _check_status(url: str, status: int, body: str) -> None:
    """HTTP 503, or vLLM's HTTP 500 for a dead EngineCore, means the server is going away: a
    replica fault, not a request error."""
    if status == 503:
        raise ReplicaDownError(f"{url}: HTTP 503 (service unavailable): {body[:200]}")
    if status == 500 and any(m in body for m in ENGINE_DEAD_MARKERS):
        raise ReplicaDownError(f"{url}: HTTP 500, the engine died: {body[:200]}")
    if status >= 400:
        raise RequestError(
            f"{url}: HTTP {status}: {body[:300]}", status=status, retryable=status >= 500
        )


class AiohttpTransport:
    """``Transport`` over one ``aiohttp.ClientSession`` (created lazily, closed by ``aclose``).

    No connection limit per host: all requests of a step are in flight at once (all-admit)."""

    def __init__(self, connect_timeout_s: float = 10.0) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._connect_timeout_s = connect_timeout_s

    def _sess(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # force_close: one connection per request, no keep-alive pool. Reusing a pooled
            # connection that the server (vLLM's uvicorn) has just closed fails with
            # ServerDisconnectedError / ECONNRESET, which would be taken for a dead replica
            # (seen on real vLLM at step starts, even with a 2 s client keep-alive).
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, force_close=True)
            )
        return self._session

    def _timeout(self, timeout_s: float | None) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(total=timeout_s, sock_connect=self._connect_timeout_s)

    async def post_json(self, url: str, payload: JSON, timeout_s: float | None) -> Any:
        try:
            async with self._sess().post(
                url, json=payload, timeout=self._timeout(timeout_s)
            ) as resp:
                body = await resp.text()
                status = resp.status
        except aiohttp.ClientError as exc:
            raise _classify(url, exc) from exc
        except TimeoutError as exc:
            raise _classify(url, exc) from exc
        _check_status(url, status, body)
        if not body.strip():
            return None  # e.g. SGLang's /abort_request answers 200 with no body
        try:
            return json.loads(body)
        except json.JSONDecodeError as exc:
            raise RequestError(f"{url}: malformed JSON: {body[:200]!r}") from exc

    async def stream_json(
        self, url: str, payload: JSON, timeout_s: float | None
    ) -> AsyncIterator[JSON]:
        try:
            async with self._sess().post(
                url, json=payload, timeout=self._timeout(timeout_s)
            ) as resp:
                if resp.status >= 400:
                    _check_status(url, resp.status, await resp.text())
                # server-sent events split into lines here, on whatever the socket delivered
                # (aiohttp's line reader costs several times more per streamed chunk)
                tail = b""
                async for got in resp.content.iter_any():
                    lines = (tail + got if tail else got).split(b"\n")
                    tail = lines.pop()
                    for raw in lines:
                        if raw.startswith(b"data:"):
                            data = raw[5:].strip()
                            if data == b"[DONE]":
                                return
                            yield _stream_chunk(url, data)
                if tail.startswith(b"data:") and tail[5:].strip() != b"[DONE]":
                    yield _stream_chunk(url, tail[5:].strip())
        except aiohttp.ClientError as exc:
            raise _classify(url, exc) from exc
        except TimeoutError as exc:
            raise _classify(url, exc) from exc

    async def get(self, url: str, timeout_s: float | None) -> tuple[int, str]:
        try:
            async with self._sess().get(url, timeout=self._timeout(timeout_s)) as resp:
                return resp.status, await resp.text()
        except aiohttp.ClientError as exc:
            raise _classify(url, exc) from exc
        except TimeoutError as exc:
            raise _classify(url, exc) from exc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _stream_chunk(url: str, data: bytes) -> JSON:
    """One ``data:`` payload of a stream, decoded; a malformed one is a ``RequestError``."""
    try:
        out: JSON = json.loads(data.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(f"{url}: malformed stream chunk {data[:200]!r}") from exc
    return out
