"""One HTTP/1.1 request on its own non-blocking socket, driven by event-loop callbacks.

``LeanTransport``'s fast path for numeric-IP ``http`` URLs. A request is: a socket connected
without blocking, the whole request written when the socket is writable, the response read when
it is readable, until its ``Content-Length`` (or the last chunk, or EOF) is in; then the socket
is closed. No streams, transports or tasks of its own: at 4,096 requests in flight the router's
CPU per request is what matters, and asyncio's stream machinery (``open_connection``,
``StreamReader``, ``wait_for``) cost more than the rest of a request together.

``start(...).fut`` gives ``(status, body)`` or raises what the streams path raised for the same
event (``OSError`` subclasses for refused / reset, ``TimeoutError``,
``asyncio.IncompleteReadError``, ``asyncio.LimitOverrunError``, ``ValueError`` for a malformed
length); closing it (``close()``, also on cancellation) aborts the request on the server.
"""

from __future__ import annotations

import _socket
import asyncio
import errno
import math
import os
import socket
import sys
import weakref
from typing import Any

MAX_HEADER_BYTES = 65536
_READ_BYTES = 65536  # per recv: a 256 KiB buffer (asyncio's) is mapped and unmapped by malloc
# on every call, which cost more kernel time than the rest of a request's reading
_NONBLOCK = getattr(socket, "SOCK_NONBLOCK", 0)  # Linux: non-blocking from the start
_RawSocket = _socket.socket  # socket.socket's C base: no Python wrapper to build and close
_TO_EOF = sys.maxsize  # no Content-Length and not chunked: the body ends at EOF


class _Exchange:
    """The state of one request; the loop calls ``_writable`` / ``_readable``."""

    __slots__ = ("_buf", "_chunk_pos", "_chunks", "_connect_by", "_deadline", "_end", "_fd",
                 "_loop", "_out", "_send_error", "_sock", "_start", "_status", "_watch",
                 "fut")  # fmt: skip

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        family: int,
        addr: tuple[Any, ...],
        request: bytes,
        connect_timeout_s: float | None,
        timeout_s: float | None,
    ) -> None:
        self._loop = loop
        self.fut: asyncio.Future[tuple[int, bytes]] = loop.create_future()
        self._out: bytes | memoryview | None = None  # what is left to send
        self._buf = bytearray()
        self._start = -1  # body start in _buf once the head is parsed
        self._end = -1  # body end (Content-Length) or _TO_EOF
        self._chunk_pos = -1  # chunked: next chunk-size line in _buf (-1: not chunked)
        self._chunks: list[bytes] = []
        self._status = 0
        self._send_error: OSError | None = None
        self._fd = -1
        now = loop.time()
        self._deadline = None if timeout_s is None else now + timeout_s
        self._connect_by = None if connect_timeout_s is None else now + connect_timeout_s
        self._watch = _watch(loop)
        sock = _RawSocket(family, socket.SOCK_STREAM | _NONBLOCK)
        self._sock = sock
        try:
            if not _NONBLOCK:
                sock.setblocking(False)
            err = sock.connect_ex(addr)
            if err not in (0, errno.EINPROGRESS, errno.EINTR):
                raise OSError(err, os.strerror(err))
            # on loopback the connection is usually up already: send at once, and wait for
            # the socket to be writable only when it is not (or the request did not fit)
            try:
                n = sock.send(request)
            except (BlockingIOError, InterruptedError):
                n = -1  # still connecting
            else:
                self._connect_by = None
        except OSError as exc:
            sock.close()
            self.fut.set_exception(exc)  # refused: ConnectionRefusedError
            return
        self._fd = sock.fileno()
        if n < len(request):  # the rest goes as the socket drains, without Nagle's delay
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._out = request if n < 0 else memoryview(request)[n:]
            loop.add_writer(self._fd, self._writable)
        loop.add_reader(self._fd, self._readable)
        self._watch.add(self)

    def due(self) -> float | None:
        """When this request times out (loop time; None: never)."""
        return _min(self._connect_by, self._deadline)

    def close(self) -> None:
        """Stop watching the socket and close it (also: the request was cancelled)."""
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            if self._out is not None:
                self._loop.remove_writer(self._fd)
            self._fd = -1
            self._sock.close()
            self._watch.discard(self)

    def _fail(self, exc: BaseException) -> None:
        self.close()
        if not self.fut.done():
            self.fut.set_exception(exc)

    def _done(self, body: bytes) -> None:
        self.close()
        if not self.fut.done():
            self.fut.set_result((self._status, body))

    def timed_out(self) -> None:
        self._fail(TimeoutError())

    def _writable(self) -> None:
        out = self._out
        if out is None:
            return
        if self._connect_by is not None:  # the first writable event: connected, or not?
            err = self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self._fail(OSError(err, os.strerror(err)))  # refused: ConnectionRefusedError
                return
            self._connect_by = None
        try:
            n = self._sock.send(out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:  # the server may have answered (and closed): read what it sent
            self._send_error = exc
            self._stop_writing()
            return
        if n < len(out):
            self._out = memoryview(out)[n:]
        else:
            self._stop_writing()

    def _stop_writing(self) -> None:
        self._out = None
        self._loop.remove_writer(self._fd)

    def _readable(self) -> None:
        try:
            data = self._sock.recv(_READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._fail(exc)
            return
        if not data:
            self._eof()
            return
        buf = self._buf
        buf += data
        try:
            if self._start < 0 and not self._head():
                return
            if self._chunk_pos >= 0:
                self._dechunk()
            elif len(buf) >= self._end:
                self._done(bytes(buf[self._start : self._end]))
        except (ValueError, OSError, asyncio.LimitOverrunError) as exc:
            self._fail(exc)

    def _head(self) -> bool:
        """Parse the status line and headers once they are in; False while they are not."""
        buf = self._buf
        i = buf.find(b"\r\n\r\n")
        if i < 0:
            if len(buf) > MAX_HEADER_BYTES:
                raise asyncio.LimitOverrunError("no end of headers within the limit", len(buf))
            return False
        lines = buf[:i].decode("latin-1").split("\r\n")
        try:
            self._status = int(lines[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            raise _BadStatus(lines[0][:100]) from None
        length: str | None = None
        chunked = False
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                continue
            key = name.strip().lower()
            if key == "content-length":
                length = value.strip()
            elif key == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
        self._start = i + 4
        if chunked:
            self._chunk_pos = self._start
            self._end = _TO_EOF
        elif length is not None:
            self._end = self._start + int(length)
        else:
            self._end = _TO_EOF
        return True

    def _dechunk(self) -> None:
        buf, pos = self._buf, self._chunk_pos
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            size = int(bytes(buf[pos:eol]).split(b";", 1)[0].strip(), 16)
            if size == 0:
                if buf.find(b"\r\n", eol + 2) < 0:  # end of (empty) trailers not in yet
                    break
                self._done(b"".join(self._chunks))
                return
            if len(buf) < eol + 2 + size + 2:
                break
            self._chunks.append(bytes(buf[eol + 2 : eol + 2 + size]))
            pos = eol + 2 + size + 2
        self._chunk_pos = pos

    def _eof(self) -> None:
        if self._start >= 0 and self._end == _TO_EOF and self._chunk_pos < 0:
            self._done(bytes(self._buf[self._start :]))
            return
        if self._send_error is not None:
            self._fail(self._send_error)
            return
        expected = None if self._end in (-1, _TO_EOF) else self._end - self._start
        self._fail(asyncio.IncompleteReadError(bytes(self._buf[self._start :]), expected))


class _BadStatus(ValueError):
    """The status line is not ``HTTP/1.x NNN ...``."""


class _Watch:
    """The deadlines of one loop's open requests, checked by one timer at the earliest of them
    (a timer per request cost more than the rest of the request's bookkeeping)."""

    def __init__(self) -> None:  # holds no reference to its loop (the loop keys it weakly)
        self._open: set[_Exchange] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._at = math.inf

    def add(self, ex: _Exchange) -> None:
        self._open.add(ex)
        due = ex.due()
        if due is not None and due < self._at:
            self._arm(due)

    def discard(self, ex: _Exchange) -> None:
        self._open.discard(ex)

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._at = at
        self._timer = asyncio.get_running_loop().call_at(at, self._check)

    def _check(self) -> None:
        self._timer, self._at = None, math.inf
        now = asyncio.get_running_loop().time()
        late, nxt = [], math.inf
        for ex in self._open:
            due = ex.due()
            if due is None:
                continue
            if due <= now:
                late.append(ex)
            elif due < nxt:
                nxt = due
        for ex in late:
            ex.timed_out()
        if nxt < math.inf:
            self._arm(nxt)


_WATCHES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watch] = (
    weakref.WeakKeyDictionary()
)


def _watch(loop: asyncio.AbstractEventLoop) -> _Watch:
    w = _WATCHES.get(loop)
    if w is None:
        w = _WATCHES[loop] = _Watch()
    return w


def _min(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def start(
    family: int,
    addr: tuple[Any, ...],
    request: bytes,
    connect_timeout_s: float | None,
    timeout_s: float | None,
) -> _Exchange:
    """Send ``request`` (a whole HTTP/1.1 request with ``Connection: close``) to ``addr``. The
    caller awaits ``.fut`` for the response's status and (de-chunked) body, and calls
    ``.close()`` when done or cancelled. ``connect_timeout_s`` bounds the connect and
    ``timeout_s`` the request from the moment it is connected; either raises ``TimeoutError``.
    Not a coroutine: one object less per request on the router's hot path."""
    return _Exchange(asyncio.get_running_loop(), family, addr, request, connect_timeout_s,
                     timeout_s)  # fmt: skip


def numeric_address(host: str, port: int) -> tuple[int, tuple[Any, ...]] | None:
    """(family, address) when ``host`` is an IPv4 / IPv6 literal, else None (a name)."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        return family, ((host, port) if family == socket.AF_INET else (host, port, 0, 0))
    return None


BadStatus = _BadStatus

__all__ = ["MAX_HEADER_BYTES", "BadStatus", "numeric_address", "start"]
