"""A lean HTTP/1.1 POST for the router's hot path (non-streaming completions).

At cluster scale (64 replicas, 4,096 requests in flight) the router's CPU went mostly to
aiohttp's per-request client machinery (session, connector, tracing, timeouts). Every request
of a step starts at once on its own connection anyway (all-admit; no keep-alive, see
``AiohttpTransport``), so a request here is: open a TCP connection, write one request with
``Connection: close``, read the status line and headers, read the body (``Content-Length``,
chunked, or to EOF), close. That halved the router's CPU per request; driving the socket from
loop callbacks instead of asyncio streams (``http_exchange``, numeric-IP URLs) and parsing the
token ids with numpy (``ids_json``) cut it again. Cancelling the awaiting task closes the
socket, which aborts the request on the server, as before. Streaming and GET stay on aiohttp;
``https`` URLs fall back to it.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tailsieve.runtime.engine import ids_json
from tailsieve.runtime.engine.backends import EncodedIds
from tailsieve.runtime.engine.faults import ReplicaDownError, RequestError, check_status
from tailsieve.runtime.engine.http_exchange import (
    MAX_HEADER_BYTES,
    BadStatus,
    numeric_address,
    start,
)
from tailsieve.runtime.engine.transport import JSON, AiohttpTransport


class LeanTransport(AiohttpTransport):
    """``AiohttpTransport`` whose ``post_json`` speaks plain HTTP/1.1: on its own socket driven
    by loop callbacks (``http_exchange``) for numeric-IP URLs, over asyncio streams for host
    names; token-id arrays of the answer are decoded by ``ids_json``."""

    def __init__(self, connect_timeout_s: float = 10.0) -> None:
        super().__init__(connect_timeout_s)
        self._targets: dict[str, _Target | None] = {}

    async def post_json(self, url: str, payload: JSON, timeout_s: float | None) -> Any:
        target = self._targets.get(url, _UNSEEN)
        if target is _UNSEEN:
            target = self._targets[url] = _Target.of(url)
        if target is None:
            return await super().post_json(url, payload, timeout_s)
        try:
            if target.addr is not None and self._callbacks_ok:
                data = _encode(payload)
                request = target.head + b"%d\r\nConnection: close\r\n\r\n" % len(data) + data
                ex = start(target.family, target.addr, request, self._connect_timeout_s,
                           timeout_s)  # fmt: skip
                try:
                    status, body = await ex.fut
                finally:
                    ex.close()
            else:
                async with asyncio.timeout(timeout_s):
                    status, body = await self._exchange(target.parts, url, payload)
        except TimeoutError as exc:
            raise ReplicaDownError(f"{url}: timed out after {timeout_s} s") from exc
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            raise ReplicaDownError(f"{url}: {type(exc).__name__}: {exc}") from exc
        except BadStatus as exc:
            raise RequestError(f"{url}: bad status line {str(exc)!r}") from None
        except ValueError as exc:  # a malformed length or chunk size
            raise RequestError(f"{url}: malformed HTTP response ({exc})") from exc
        except NotImplementedError:  # a loop without add_reader (Windows' proactor)
            self._callbacks_ok = False
            return await self.post_json(url, payload, timeout_s)
        check_status(url, status, body[:400].decode("utf-8", "replace"))
        if not body.strip():
            return None  # e.g. SGLang's /abort_request answers 200 with no body
        try:
            return ids_json.loads(body, _encoded_key(payload) is not None)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RequestError(f"{url}: malformed JSON: {body[:200]!r}") from exc

    _callbacks_ok = True

    async def _exchange(self, parts: Any, url: str, payload: JSON) -> tuple[int, bytes]:
        host, port = parts.hostname, parts.port or 80
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, limit=MAX_HEADER_BYTES),
            self._connect_timeout_s,
        )
        try:
            data = _encode(payload)
            writer.write(
                f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                "Content-Type: application/json\r\nAccept: application/json\r\n"
                f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
                + data
            )
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            try:
                status = int(lines[0].split(" ", 2)[1])
            except (IndexError, ValueError):
                raise BadStatus(lines[0][:100]) from None
            headers = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if sep:
                    headers[name.strip().lower()] = value.strip()
            if "chunked" in headers.get("transfer-encoding", "").lower():
                body = await _read_chunked(reader)
            elif "content-length" in headers:
                body = await reader.readexactly(int(headers["content-length"]))
            else:
                body = await reader.read()
        except BaseException:
            writer.transport.abort()  # also on cancellation: the server sees the client go
            raise
        writer.close()
        return status, body


def _encode(payload: JSON) -> bytes:
    """Compact JSON; token ids already encoded (``EncodedIds``: a continued piece's prompt,
    whatever the engine's key for it) are spliced in as they are."""
    key = _encoded_key(payload)
    if key is None:
        return _compact(payload).encode()
    rest = _compact({k: v for k, v in payload.items() if k != key})
    return (rest[:-1] + ("," if len(rest) > 2 else "") + f'"{key}":' + payload[key].json
            + "}").encode()


def _encoded_key(payload: JSON) -> str | None:
    """The key of the payload's pre-encoded token ids (``EncodedIds``), if any."""
    return next((k for k, v in payload.items() if isinstance(v, EncodedIds)), None)


_compact = json.JSONEncoder(separators=(",", ":")).encode  # one encoder, not one per request


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    out = bytearray()
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            await reader.readuntil(b"\r\n")  # end of (empty) trailers
            return bytes(out)
        out += await reader.readexactly(size)
        await reader.readexactly(2)


@dataclass(frozen=True, slots=True)
class _Target:
    """What a URL needs per request, worked out once: the request head up to the length, and
    the socket address when the host is a numeric IP."""

    parts: Any  # urlsplit result
    head: bytes
    family: int
    addr: tuple[Any, ...] | None

    @classmethod
    def of(cls, url: str) -> _Target | None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None:
            return None  # https and the like: aiohttp
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        head = (f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                "Content-Type: application/json\r\nAccept: application/json\r\n"
                "Content-Length: ").encode()  # fmt: skip
        resolved = numeric_address(parts.hostname, parts.port or 80)
        family, addr = resolved if resolved is not None else (0, None)
        return cls(parts, head, family, addr)


_UNSEEN: Any = object()
