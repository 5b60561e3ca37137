"""What an engine's answer means: the one fault classifier of every execution path.

Every path that talks to a replica (the single-turn attempts, the session gateway's pieces, the
proxy, the verl router) reads an engine's answer through these functions, so each kind of
answer means the same thing everywhere:

- ``ReplicaDownError`` (the replica is out: take it out of service, continue its responses
  elsewhere from the last token received, probe it, re-admit it when it answers):
  a connection refused / reset / closed mid-request, a timeout, HTTP 503, vLLM's HTTP 500 for a
  dead engine (``EngineDeadError``), a stream that carries the engine's own error message
  instead of a choice (vLLM's front end ends the stream so when its worker died), a stream that
  ends before every response said why it finished (cut: never a finished response), and a
  replica that makes no progress for longer than its cost model says it should
  (``ReplicaStalledError``, found by ``runtime.execution.stall_watch``);
- ``RequestError``: the replica answered, but badly (HTTP 4xx/5xx, malformed JSON, SGLang's
  abort of a request for a reason of the request, ``engine_abort``). Retried with backoff where
  ``retryable`` (HTTP 4xx is not: a client bug retrying cannot fix).

SGLang ends a request it refuses with ``finish_reason: {"type": "abort", "message",
"status_code", "err_type"}`` (its scheduler's ``FINISH_ABORT``: 400 for an input longer than
the context) and a stream it refuses up front with an error chunk (its front end's
``ValueError``): both are the request's fault, named by the server's message, and no replica
is taken out for them. An abort without a status is an ``/abort_request`` (SGLang says
"Aborted" or "Abort in waiting queue"): the router's own move, interrupt or cancel, or
someone else's abort, read as before (a piece that ends early).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection, Mapping
from typing import Any

from tailsieve.errors import ReplicaError

ENGINE_DEAD_MARKERS = ("EngineCore encountered an issue", "EngineDeadError")
"""Text of vLLM's ``EngineDeadError`` (``vllm/v1/engine/exceptions.py``), sent as HTTP 500."""


class ReplicaDownError(ReplicaError):
    """The replica cannot be reached or stopped answering (refused, reset, timeout, its engine
    died, a stream cut). ``partial``: what the piece streamed before the fault, where a
    runner kept it (the caller keeps those tokens and continues after them)."""

    partial: Any = None


class ReplicaStalledError(ReplicaDownError):
    """The replica made no progress on a running piece for longer than its cost model allows
    (a hung server: it accepts connections and never answers)."""


class RequestError(ReplicaError):
    """The replica answered with an error or with something that is not the expected JSON
    (``server_message``: the server's own message in its error answer, where it gave one)."""

    def __init__(self, message: str, status: int | None = None, retryable: bool = True,
                 server_message: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.server_message = server_message


def from_exception(url: str, exc: BaseException) -> ReplicaError:
    """A client-side exception (connection error, timeout) as the fault it means."""
    if isinstance(exc, ReplicaError):
        return exc
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return ReplicaDownError(f"{url}: timed out")
    return ReplicaDownError(f"{url}: {type(exc).__name__}: {exc}")


def check_status(url: str, status: int, body: str) -> None:
    """An HTTP status as a fault: 503, or vLLM's 500 for a dead EngineCore, means the server is
    going away (``ReplicaDownError``); any other status >= 400 is a ``RequestError``."""
    if status == 503:
        raise ReplicaDownError(f"{url}: HTTP 503 (service unavailable): {body[:200]}")
    if status == 500 and any(m in body for m in ENGINE_DEAD_MARKERS):
        raise ReplicaDownError(f"{url}: HTTP 500, the engine died: {body[:200]}")
    if status >= 400:
        raise RequestError(f"{url}: HTTP {status}: {body[:300]}", status=status,
                           retryable=status >= 500, server_message=error_message(body))


def error_message(body: str) -> str | None:
    """The server's message in an error answer (vLLM ``{"error": {"message"}}``, older
    ``{"message"}``, FastAPI's ``{"detail"}``); None when the body is not such JSON."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    err = data.get("error")
    msg = (err.get("message") if isinstance(err, dict) else None) or data.get("message") \
        or data.get("detail")
    return str(msg) if msg else None


def engine_error(chunk: Mapping[str, Any]) -> str | None:
    """The engine's own error message when a streamed chunk is one instead of a choice (vLLM:
    ``{"error": {"message": ...}}``, older ``{"object": "error", "message": ...}``), else
    None."""
    if chunk.get("choices") or "text" in chunk or "meta_info" in chunk:
        return None
    err = chunk.get("error")
    if isinstance(err, Mapping):
        return str(err.get("message") or err)
    if err:
        return str(err)
    if chunk.get("object") == "error":
        return str(chunk.get("message") or "error")
    return None


def check_chunk(url: str, chunk: Mapping[str, Any]) -> None:
    """A streamed chunk that is the engine's error message: the replica is down (vLLM's front
    end ends the stream so when its worker died); on SGLang's ``/generate`` it is the front
    end refusing the request (its ``ValueError``, e.g. the input is longer than the context):
    a ``RequestError``, not retried."""
    msg = engine_error(chunk)
    if msg is None:
        return
    if url.endswith("/generate"):
        raise RequestError(f"{url}: the server refused the request: {msg[:300]}", status=400,
                           retryable=False)
    raise ReplicaDownError(f"{url}: the stream ended with the engine's error: {msg[:300]}")


def engine_abort(where: str, finish_reason: Any) -> None:
    """SGLang's abort of a request for a reason of its own, carrying a status
    (``{"type": "abort", "message", "status_code"}``): read as that HTTP status with the
    server's message (``check_status``: 400 a ``RequestError`` not retried, 503 the replica
    down). Any other finish reason, and an abort without a status (an ``/abort_request``),
    passes."""
    if not isinstance(finish_reason, Mapping) or finish_reason.get("type") != "abort":
        return
    status = finish_reason.get("status_code")
    if isinstance(status, int) and status >= 400:
        msg = finish_reason.get("message") or "no message"
        check_status(where, status, f"the server aborted the request: {msg}")


def check_finished(where: str, reasons: Mapping[int, str], indices: Collection[int]) -> None:
    """A stream that ended must have said why each of its responses ``indices`` finished: one
    cut before that is a replica fault, never a finished response."""
    missing = sorted(i for i in indices if not reasons.get(i))
    if missing:
        raise ReplicaDownError(
            f"{where}: the stream ended without a finish reason for responses {missing}")


def refused(exc: BaseException) -> bool:
    """The connection was refused: the request never reached a server (nothing generated)."""
    e: BaseException | None = exc
    for _ in range(8):
        if e is None:
            break
        if isinstance(e, ConnectionRefusedError) or type(e).__name__ == "ClientConnectorError":
            return True
        e = e.__cause__ or e.__context__
    return "refused" in str(exc).lower()


class RequestFailedError(RequestError):
    """A request error that retries could not fix (or that is not retryable); ``sample`` is
    the response whose request failed."""

    def __init__(self, message: str, status: int | None = None, sample: int = 0) -> None:
        super().__init__(message, status=status, retryable=False)
        self.sample = sample
