"""The HTTP seam of the live runtime: one small protocol, one aiohttp implementation.

Everything that talks to a replica goes through a ``Transport``; tests swap in a stub. What an
answer means (``ReplicaDownError``: the replica is out; ``RequestError``: it answered badly) is
decided by ``runtime.engine.faults``, the one classifier every path shares; a streamed chunk that is
the engine's error message raises ``ReplicaDownError`` here, where every stream passes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

import aiohttp

from tailsieve.errors import ReplicaError
from tailsieve.runtime.engine.faults import (
    ReplicaDownError,
    RequestError,
    check_chunk,
    check_status,
    from_exception,
)

JSON = dict[str, Any]


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
            raise from_exception(url, exc) from exc
        except TimeoutError as exc:
            raise from_exception(url, exc) from exc
        check_status(url, status, body)
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
                    check_status(url, resp.status, await resp.text())
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
            raise from_exception(url, exc) from exc
        except TimeoutError as exc:
            raise from_exception(url, exc) from exc

    async def get(self, url: str, timeout_s: float | None) -> tuple[int, str]:
        try:
            async with self._sess().get(url, timeout=self._timeout(timeout_s)) as resp:
                return resp.status, await resp.text()
        except aiohttp.ClientError as exc:
            raise from_exception(url, exc) from exc
        except TimeoutError as exc:
            raise from_exception(url, exc) from exc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


async def probe_health(transport: Transport, base_url: str, timeout_s: float) -> str:
    """The one health probe of an HTTP replica: ``GET /health`` within ``timeout_s`` (a hung
    server accepts the connection and never answers). "" when it answered 200, else why not."""
    try:
        status, _ = await transport.get(base_url + "/health", timeout_s)
    except ReplicaDownError as exc:
        return str(exc)
    return "" if status == 200 else f"/health answered {status}"


def _stream_chunk(url: str, data: bytes) -> JSON:
    """One ``data:`` payload of a stream, decoded; a malformed one is a ``RequestError``."""
    try:
        out: JSON = json.loads(data.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(f"{url}: malformed stream chunk {data[:200]!r}") from exc
    check_chunk(url, out)
    return out


__all__ = ["JSON", "AiohttpTransport", "ReplicaDownError", "ReplicaError", "RequestError",
           "Transport", "probe_health"]
