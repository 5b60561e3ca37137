"""``HttpPieceRunner``: pieces over HTTP, to vLLM's ``/v1/completions`` or SGLang's ``/generate``.

The one engine client of every execution path: the session gateway's pieces, the single-turn
step's chained pieces and its whole responses (a whole response is a piece with no cap below its
``max_tokens``; a chat prompt goes to vLLM's ``/v1/chat/completions``, backend ``vllm-chat``;
``run_samples`` sends a group as one request with ``n`` responses).

A piece's request and a whole answer are mapped by ``piece_wire`` (token-id prompts, so a
turn continues on any replica exactly from its last seam). Requests go through a
``runtime.engine.transport.Transport`` (``LeanTransport`` by default, a stub in tests); request errors
(HTTP 5xx, malformed JSON) are retried with exponential backoff, then raised; HTTP 4xx is not
retried, nor SGLang's abort of a request it refuses (``runtime.engine.faults.engine_abort``: the
server's message, e.g. an input longer than the context, ends the piece); a replica fault
(``runtime.engine.faults``: unreachable, its engine died, a stream cut or ending in the engine's
error message) raises ``ReplicaDownError`` at once, carrying what a streamed piece delivered
before it (``partial``).

A running piece can be ended at once (``interrupt``, the ``PieceInterrupter`` seam a mid-turn
move uses) on SGLang, by ``POST /abort_request {"rid"}`` (the piece answers with its partial
output), and on vLLM with ``stream=True`` (each piece is streamed, ``streamed``; closing the
stream aborts the request on the server, and the piece returns the tokens streamed so far).
Unstreamed vLLM pieces cannot be interrupted without losing their tokens: a move waits for
the running piece's end. A piece that carries a ``sink`` (``PieceStreamer``) is streamed on
either server, whatever ``stream`` says: each chunk's tokens go to the sink as they come, and
``interrupt`` closes its stream (after its last token that came with text:
``streamed.StreamedPiece.stop_at_boundary``). A streamed piece that already gave its sink
tokens is not retried (that would send them again): it ends with them, finish reason "abort".

The served model, when not given, is asked of the servers once (``resolve_model``; the rule
and the other questions about it: ``models``, a ``served_models.ServedModels``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tailsieve.errors import ConfigError
from tailsieve.runtime.engine.backends import Backend, SamplingParams
from tailsieve.runtime.engine.faults import ReplicaDownError, RequestError, check_status
from tailsieve.runtime.engine.lean_http import LeanTransport
from tailsieve.runtime.engine.piece_wire import piece_body, piece_outputs
from tailsieve.runtime.engine.pieces import PieceOutput, PieceRequest
from tailsieve.runtime.engine.served_models import ServedModels
from tailsieve.runtime.engine.streamed import StreamedPiece, read_chunks, stream_outputs
from tailsieve.runtime.engine.transport import JSON, Transport, probe_health
from tailsieve.runtime.tasks import cancel_and_wait

ABORT_TRIES = 3  # SGLang: /abort_request is sent again while the piece still runs
ABORT_RETRY_S = 0.5  # (an abort that arrives before the server registered the rid is lost)


@dataclass(slots=True)
class _Live:
    """A running piece: where it runs, what it streamed, how to stop it."""

    replica: int
    streamed: StreamedPiece | None = None
    samples: list[StreamedPiece] = field(default_factory=list)  # each response's (``n``)
    task: asyncio.Future[None] | None = None  # the stream's reader (cancelled: interrupted)


class HttpPieceRunner:
    """Pieces to ``endpoints[replica]`` (base URLs) on ``backend`` (``vllm`` or ``sglang``).
    ``model``: the served model name vLLM requests carry (None: ask the servers once);
    ``stream``: vLLM pieces are streamed (so that a move can interrupt one), every
    ``stream_interval`` tokens (vLLM's per-request ``stream_interval``; None: every token);
    ``return_token_ids=False``: vLLM answers counts only (``PieceOutput.num_tokens``; whole
    responses, never continued);
    ``tokenize_timeout_s``: a ``/tokenize`` call's limit (None: ``health_timeout_s``)."""

    def __init__(
        self,
        endpoints: Sequence[str],
        backend: Backend | str = Backend.VLLM,
        model: str | None = None,
        transport: Transport | None = None,
        request_timeout_s: float | None = 3600.0,
        max_retries: int = 3,
        backoff_s: float = 0.25,
        backoff_max_s: float = 8.0,
        health_timeout_s: float = 5.0,
        tokenize_timeout_s: float | None = None,
        stream: bool = False,
        stream_interval: int | None = None,
        return_token_ids: bool = True,
    ) -> None:
        self.backend = Backend(backend)
        if stream and self.backend is Backend.SGLANG:
            raise ConfigError("stream=True streams vLLM pieces; SGLang pieces are interrupted "
                              "by /abort_request without it")
        if stream_interval is not None and (not stream or stream_interval < 1):
            raise ConfigError("stream_interval needs stream=True and must be >= 1")
        if not endpoints:
            raise ConfigError("HttpPieceRunner needs at least one endpoint")
        if max_retries < 0 or backoff_s < 0 or backoff_max_s < 0:
            raise ConfigError("max_retries, backoff_s and backoff_max_s must be >= 0")
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self.model = model
        self._t: Transport = transport or LeanTransport()
        self._timeout_s = request_timeout_s
        self._max_retries = max_retries
        self._backoff_s, self._backoff_max_s = backoff_s, backoff_max_s
        self._health_timeout_s = health_timeout_s
        self._tokenize_timeout_s = tokenize_timeout_s or health_timeout_s
        self._model_lock = asyncio.Lock()
        self.models = ServedModels(self.endpoints, self.backend,
                                   lambda url: self._t.get(url, self._health_timeout_s))
        self.stream = stream
        self.stream_interval = stream_interval
        self._live: dict[str, _Live] = {}
        self._aborts: set[asyncio.Task[None]] = set()
        self.return_token_ids = return_token_ids

    @property
    def interrupts(self) -> bool:
        """Whether ``interrupt`` ends running pieces: SGLang, or vLLM with streaming."""
        return self.stream or self.backend is Backend.SGLANG

    @property
    def streams_sinks(self) -> bool:
        """Pieces with a sink are streamed (``PieceStreamer``), on vLLM and SGLang."""
        return True

    def interrupt(self, replica: int, request_id: str) -> None:
        """End the running piece ``request_id`` now (see the module docstring); ignored
        where pieces cannot be interrupted or the piece is not running."""
        live = self._live.get(request_id)
        if live is None:
            return
        if live.task is not None:  # a streamed piece: closed where its text is whole
            if live.streamed is not None:
                live.streamed.stop_at_boundary(live.task.cancel)
            else:
                live.task.cancel()
        elif self.backend is Backend.SGLANG:
            self._abort_later(live.replica, request_id)

    def cut(self, request_id: str) -> None:
        """End the streamed piece ``request_id`` now, wherever its text stands (a stalled
        replica sends no further token): its ``run_piece`` returns what came, finish reason
        "abort". Ignored for a piece not streamed or not running."""
        live = self._live.get(request_id)
        if live is not None and live.task is not None:
            live.task.cancel()

    def _abort_later(self, replica: int, request_id: str) -> None:
        task = asyncio.ensure_future(self._abort(replica, request_id))
        self._aborts.add(task)
        task.add_done_callback(self._aborts.discard)

    def generated_tokens(self, request_id: str) -> int | None:
        """Tokens the running piece has streamed so far (None: not streamed, or not running)."""
        live = self._live.get(request_id)
        return None if live is None or live.streamed is None else len(live.streamed.ids)

    async def run_piece(self, replica: int, piece: PieceRequest) -> PieceOutput:
        """Generate ``piece`` on ``replica`` (see the module docstring for errors)."""
        return (await self.run_samples(replica, piece))[0]

    async def run_samples(self, replica: int, piece: PieceRequest) -> list[PieceOutput]:
        """The ``piece.num_samples`` responses of one request, in sample order (a group sent
        as one request with ``n``); otherwise as ``run_piece``."""
        base = self._base(replica)
        url = base + self.backend.path
        streamed = self.stream or piece.sink is not None
        model = await self._model() if self.backend is not Backend.SGLANG else ""
        body = piece_body(self.backend, model, piece, streamed, self.stream_interval,
                          self.return_token_ids)
        where = f"{url} piece {piece.request_id}"
        retry = 0
        while True:
            live = self._live[piece.request_id] = _Live(replica)
            try:
                if streamed:
                    return await self._streamed(url, body, live, where, piece)
                raw = await self._t.post_json(url, body, self._timeout_s)
                return piece_outputs(self.backend, raw, piece.num_samples, where,
                                     self.return_token_ids)
            except asyncio.CancelledError:
                if self.backend is Backend.SGLANG:  # it notices a closed connection only at
                    # its next disconnect check: abort the piece by id too (in the background)
                    self._abort_later(replica, piece.request_id)
                raise
            except RequestError as exc:
                got = live.samples
                if piece.sink is not None and any(g.ids for g in got):
                    return [g.output(interrupted=True) for g in got]  # its sink has these
                if not exc.retryable or retry >= self._max_retries:
                    raise RequestError(f"{where}: {exc} (after {retry} retries)",
                                       status=exc.status, retryable=False,
                                       server_message=exc.server_message) from exc
                await asyncio.sleep(min(self._backoff_max_s, self._backoff_s * 2**retry))
                retry += 1
            finally:
                self._live.pop(piece.request_id, None)

    async def _streamed(self, url: str, body: JSON, live: _Live, where: str,
                        piece: PieceRequest) -> list[PieceOutput]:
        """One streamed piece; interrupted (its reader cancelled), the tokens so far."""
        n = piece.num_samples
        live.samples = [StreamedPiece(sink=piece.sink, sglang=self.backend is Backend.SGLANG,
                                      index=i, num_samples=n) for i in range(n)]
        live.streamed = live.samples[0]
        live.task = asyncio.ensure_future(
            read_chunks(lambda: self._t.stream_json(url, body, self._timeout_s), live.samples,
                        where))
        return await stream_outputs(live.task, live.samples, where)

    async def _abort(self, replica: int, request_id: str) -> None:
        """SGLang: ``/abort_request`` for the piece, again while it still runs."""
        url = self._base(replica) + "/abort_request"
        for _ in range(ABORT_TRIES):
            with contextlib.suppress(ReplicaDownError, RequestError):
                await self._t.post_json(url, {"rid": request_id}, self._health_timeout_s)
            await asyncio.sleep(ABORT_RETRY_S)
            if request_id not in self._live:
                return

    async def refuses_priority(self, replica: int) -> str:
        """Why ``replica`` refuses a piece that carries a priority ("" when it takes one): one
        request of one token with priority -1. vLLM without ``--scheduling-policy priority``
        answers HTTP 400, mid-step otherwise (vLLM only: SGLang pieces carry no priority)."""
        piece = PieceRequest((), SamplingParams(max_tokens=1, temperature=0.0), 1,
                             f"priority-check-{replica}", prompt_text="Hello", priority=-1)
        try:
            await self.run_piece(replica, piece)
        except RequestError as exc:
            if exc.status is not None and 400 <= exc.status < 500:
                return str(exc)
            raise
        return ""

    async def probe(self, replica: int) -> bool:
        """``GET /health`` answers 200 within the health timeout."""
        return not await probe_health(self._t, self._base(replica), self._health_timeout_s)

    async def metrics(self, replica: int, timeout_s: float) -> str:
        """``GET /metrics`` (the engine's Prometheus text; ``runtime.engine.engine_kv``) within
        ``timeout_s``; a fault as ``runtime.engine.faults`` says."""
        url = self._base(replica) + "/metrics"
        status, body = await self._t.get(url, timeout_s)
        check_status(url, status, body)
        return body

    async def tokenize(self, text: str, replica: int = 0,
                       add_special_tokens: bool = False) -> tuple[int, ...]:
        """``text`` as ``replica``'s tokenizer gives it, with special tokens only if asked
        (vLLM's ``POST /tokenize``)."""
        return await self._tokens(replica, {"prompt": text,
                                            "add_special_tokens": add_special_tokens})

    async def tokenize_chat(self, messages: Sequence[Mapping[str, Any]], replica: int = 0,
                            options: Mapping[str, Any] | None = None) -> tuple[int, ...]:
        """Chat ``messages`` as the token ids ``replica`` gives them under the model's chat
        template, with the generation prompt (vLLM's ``POST /tokenize``); ``options``: the
        request's other chat fields (``chat_template_kwargs``, ``add_generation_prompt``...)."""
        return await self._tokens(replica, {"messages": [dict(m) for m in messages],
                                            "add_generation_prompt": True, **(options or {})})

    async def _tokens(self, replica: int, body: JSON) -> tuple[int, ...]:
        """The ids ``/tokenize`` answers ``body`` with; a fault as ``runtime.engine.faults`` says."""
        if self.backend is not Backend.SGLANG:
            body["model"] = await self._model()
        url = self._base(replica) + "/tokenize"
        out = await self._t.post_json(url, body, self._tokenize_timeout_s)
        tokens = out.get("tokens") if isinstance(out, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise RequestError(f"{url}: /tokenize answered without a 'tokens' list")
        return tuple(tokens)

    async def resolve_model(self, replicas: Sequence[int] | None = None) -> str:
        """``model``, or when it is None the one model ``replicas`` (default: all) serve, kept
        as ``model``; ``ConfigError`` listing them when they serve several."""
        async with self._model_lock:
            if self.model is None:
                self.model = await self.models.one(replicas)
        return self.model

    async def aclose(self) -> None:
        try:
            await cancel_and_wait(*self._aborts)
        finally:
            await self._t.aclose()

    def _base(self, replica: int) -> str:
        if not 0 <= replica < len(self.endpoints):
            raise ConfigError(f"replica {replica} out of range (0..{len(self.endpoints) - 1})")
        return self.endpoints[replica]

    async def _model(self) -> str:
        """The served model name (asked of the servers once when not given)."""
        return self.model if self.model is not None else await self.resolve_model()
