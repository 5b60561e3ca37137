"""``HttpPieceRunner``: pieces over HTTP, to vLLM's ``/v1/completions`` or SGLang's ``/generate``.

The one engine client of every execution path: the session gateway's pieces, the single-turn
step's chained pieces and its whole responses (a whole response is a piece with no cap below its
``max_tokens``; a chat prompt goes to vLLM's ``/v1/chat/completions``, backend ``vllm-chat``;
``run_samples`` sends a group as one request with ``n`` responses).

A piece's prompt is token ids (vLLM: ``prompt`` as a list of ids; SGLang: ``input_ids``), so a
turn continues on any replica exactly from its last seam. Requests go through a
``runtime.transport.Transport`` (``LeanTransport`` by default, a stub in tests); request errors
(HTTP 5xx, malformed JSON) are retried with exponential backoff, then raised; HTTP 4xx is not
retried, nor SGLang's abort of a request it refuses (``runtime.faults.engine_abort``: the
server's message, e.g. an input longer than the context, ends the piece); a replica fault
(``runtime.faults``: unreachable, its engine died, a stream cut or ending in the engine's
error message) raises ``ReplicaDownError`` at once, carrying what a
streamed piece delivered before it (``partial``). The server's count of cached
prompt tokens is read where it reports one (vLLM with ``--enable-prompt-tokens-details``:
``usage.prompt_tokens_details.cached_tokens``; SGLang: ``meta_info.cached_tokens``).

A running piece can be ended at once (``interrupt``, the ``PieceInterrupter`` seam a mid-turn
move uses) on SGLang, by ``POST /abort_request {"rid"}`` (the piece answers with its partial
output), and on vLLM with ``stream=True`` (each piece is streamed, ``streamed``; closing the
stream aborts the request on the server, and the piece returns the tokens streamed so far).
Unstreamed vLLM pieces cannot be interrupted without losing their tokens: a move waits for
the running piece's end. A piece that carries a ``sink`` (``PieceStreamer``) is streamed on
either server, whatever ``stream`` says: each chunk's tokens go to the sink as they come, and
``interrupt`` closes its stream (after its last token that came with text:
``streamed.StreamedPiece.stop_at_boundary``). A streamed piece that already gave its sink tokens is not
retried (that would send them again): it ends with them, finish reason "abort".

The served model is asked of the servers (``resolve_model``, ``check_model``: the one rule every
command uses when ``--model`` is not given): vLLM lists its models at ``GET /v1/models``
(``model_card``), SGLang answers ``GET /get_model_info`` and, in recent versions, ``/v1/models``
too. Exactly one model across the replicas is used; several are a ``ConfigError`` that lists
them, so a run never talks to a model nobody chose.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.runtime.backends import (
    Backend,
    PromptInput,
    Response,
    SamplingParams,
    build_request,
    parse_response,
)
from tailsieve.runtime.faults import check_status
from tailsieve.runtime.lean_http import LeanTransport
from tailsieve.runtime.sessions.pieces import PieceOutput, PieceRequest, piece_reason
from tailsieve.runtime.sessions.streamed import StreamedPiece, finished
from tailsieve.runtime.tasks import cancel_and_wait, gather_all
from tailsieve.runtime.transport import (
    JSON,
    ReplicaDownError,
    RequestError,
    Transport,
    probe_health,
)

ABORT_TRIES = 3  # SGLang: /abort_request is sent again while the piece still runs
ABORT_RETRY_S = 0.5  # (an abort that arrives before the server registered the rid is lost)
OPENAI_MODELS = "/v1/models"
SGLANG_MODEL_INFO = "/get_model_info"


@dataclass(frozen=True, slots=True)
class ModelCard:
    """A server's ``GET /v1/models`` answer: its first model's id, context limit
    (``max_model_len``) and weights directory (``root``), and the answer as it came."""

    name: str
    max_model_len: int | None
    root: str | None
    raw: dict[str, Any]


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
    ``return_token_ids=False``: vLLM answers
    counts only (``PieceOutput.num_tokens``; whole responses, never continued);
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
        body = await self._body(piece, streamed)
        where = f"{url} piece {piece.request_id}"
        retry = 0
        while True:
            live = self._live[piece.request_id] = _Live(replica)
            try:
                if streamed:
                    return await self._streamed(url, body, live, where, piece)
                raw = await self._t.post_json(url, body, self._timeout_s)
                resps = parse_response(self.backend, raw, piece.num_samples, where,
                                       allow_abort=True, keep_json=True)
                return [_output(r, raw, self.backend, self.return_token_ids) for r in resps]
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
        got = live.streamed = live.samples[0]

        async def read() -> None:
            async for chunk in self._t.stream_json(url, body, self._timeout_s):
                for one in live.samples:
                    one.add(chunk, where)

        task = live.task = asyncio.ensure_future(read())
        try:
            await asyncio.wait({task})
        finally:
            if not task.done():  # this call was cancelled: so is the stream
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            elif not task.cancelled():
                task.exception()  # read (also when this call is cancelled meanwhile)
        if task.cancelled() or got.closed:
            return [one.output(interrupted=True) for one in live.samples]
        try:
            task.result()
            for one in live.samples:
                finished(one, where)
        except ReplicaDownError as exc:  # a cut stream: what came is kept (runtime.faults)
            exc.partial = got.output(interrupted=True)
            raise
        return [one.output() for one in live.samples]

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
        """``GET /metrics`` (the engine's Prometheus text; ``runtime.engine_kv``) within
        ``timeout_s``; a fault as ``runtime.faults`` says."""
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
        """The ids ``/tokenize`` answers ``body`` with; a fault as ``runtime.faults`` says."""
        if self.backend is not Backend.SGLANG:
            body["model"] = await self._model()
        url = self._base(replica) + "/tokenize"
        out = await self._t.post_json(url, body, self._tokenize_timeout_s)
        tokens = out.get("tokens") if isinstance(out, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise RequestError(f"{url}: /tokenize answered without a 'tokens' list")
        return tuple(tokens)

    async def model_card(self, replica: int) -> ModelCard | None:
        """``replica``'s ``GET /v1/models`` (None: no HTTP 200 listing a model);
        ``ReplicaError`` when it cannot be reached."""
        status, body = await self._get(replica, OPENAI_MODELS)
        data = _json_object(body) if status == 200 else None
        rows = data.get("data") if data is not None else None
        row = rows[0] if isinstance(rows, list) and rows and isinstance(rows[0], dict) else None
        if data is None or row is None or not row.get("id"):
            return None
        mml, root = row.get("max_model_len"), row.get("root")
        return ModelCard(str(row["id"]), mml if isinstance(mml, int) else None,
                         str(root) if root else None, data)

    async def served_models(self, replica: int) -> tuple[str, ...]:
        """The model ids ``replica`` serves: the backend's own listing first (SGLang:
        ``/get_model_info``; otherwise ``/v1/models``), then the other. ``ConfigError`` when
        neither names a model; ``ReplicaError`` when it cannot be reached."""
        sglang = self.backend is Backend.SGLANG
        tried = []
        for path in (SGLANG_MODEL_INFO, OPENAI_MODELS) if sglang else (OPENAI_MODELS,
                                                                       SGLANG_MODEL_INFO):
            status, body = await self._get(replica, path)
            ids = _model_ids(path, body) if status == 200 else ()
            if ids:
                return ids
            tried.append(f"{path}: HTTP {status}" if status != 200 else f"{path}: no model listed")
        raise ConfigError(f"cannot tell which model {self.endpoints[replica]} serves "
                          f"({'; '.join(tried)}); pass --model NAME")

    async def resolve_model(self, replicas: Sequence[int] | None = None) -> str:
        """``model``, or when it is None the one model ``replicas`` (default: all) serve, kept
        as ``model``; ``ConfigError`` listing them when they serve several."""
        async with self._model_lock:
            if self.model is None:
                rs = list(range(len(self.endpoints)) if replicas is None else replicas)
                per = await gather_all(*(self.served_models(r) for r in rs))
                self.model = one_model([(self.endpoints[r], ids)
                                        for r, ids in zip(rs, per, strict=True)])
        return self.model

    async def check_model(self, name: str) -> None:
        """``ConfigError`` when a replica lists its models and ``name`` is not among them; the
        message names that replica by its index and URL. A replica that lists nothing (or
        cannot be reached) is not judged: the name is then taken on trust."""

        async def listing(r: int) -> tuple[str, ...]:
            try:
                return await self.served_models(r)
            except (ConfigError, ReplicaError):
                return ()

        per = await asyncio.gather(*(listing(r) for r in range(len(self.endpoints))))
        bad = [(i, e, ids) for i, (e, ids) in enumerate(zip(self.endpoints, per, strict=True))
               if ids and name not in ids]
        if not bad:
            return
        named = " nor ".join(f"replica {i} ({e}, serves {', '.join(ids)})" for i, e, ids in bad[:3])
        more = f" nor {len(bad) - 3} more" if len(bad) > 3 else ""
        raise ConfigError(f"--model {name!r} is not served by {named}{more}; pass a served "
                          "name, or leave --model out to use the one the replicas serve")

    async def _get(self, replica: int, path: str) -> tuple[int, str]:
        url = self._base(replica) + path
        try:
            return await self._t.get(url, self._health_timeout_s)
        except OSError as exc:
            raise ReplicaError(f"cannot reach {url}: {exc}") from None

    async def aclose(self) -> None:
        try:
            await cancel_and_wait(*self._aborts)
        finally:
            await self._t.aclose()

    def _base(self, replica: int) -> str:
        if not 0 <= replica < len(self.endpoints):
            raise ConfigError(f"replica {replica} out of range (0..{len(self.endpoints) - 1})")
        return self.endpoints[replica]

    async def _body(self, piece: PieceRequest, stream: bool) -> JSON:
        ids: tuple[int, ...] = piece.prompt_ids  # (spliced as it is where ``EncodedIds``)
        model = await self._model() if self.backend is not Backend.SGLANG else ""
        prompt = (PromptInput(piece.request_id, token_ids=ids) if ids
                  else PromptInput(piece.request_id, messages=piece.messages) if piece.messages
                  else PromptInput(piece.request_id, text=piece.prompt_text))
        body = build_request(self.backend, model, prompt, piece.sampling, piece.num_samples,
                             forced_tokens=piece.max_tokens if piece.forced else None,
                             seed=piece.sampling.seed, return_token_ids=self.return_token_ids,
                             max_tokens=piece.max_tokens, stream=stream,
                             stream_interval=self.stream_interval)
        if self.backend is Backend.SGLANG:
            body["rid"] = piece.request_id
        elif piece.priority is not None:
            body["priority"] = piece.priority  # vLLM: --scheduling-policy priority
        return body

    async def _model(self) -> str:
        """The served model name (asked of the servers once when not given)."""
        return self.model if self.model is not None else await self.resolve_model()

def _output(resp: Response, raw: Any, backend: Backend, need_ids: bool = True) -> PieceOutput:
    """A parsed response as a piece's output (its finish reason read by ``piece_reason``)."""
    if resp.token_ids is None and need_ids:
        raise RequestError("a piece came back without token ids (vLLM: return_token_ids; "
                           "SGLang: output_ids)", retryable=False)
    reason = piece_reason(resp.finish_reason)
    pids = resp.prompt_token_ids
    prompt, cached = _prompt_counts(raw, backend)
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


def one_model(listings: Sequence[tuple[str, tuple[str, ...]]]) -> str:
    """The one model the ``(endpoint, ids)`` listings name; ``ConfigError`` listing them if
    several."""
    names = sorted({n for _, ids in listings for n in ids})
    if len(names) == 1:
        return names[0]
    listing = "; ".join(f"{e}: {', '.join(ids)}" for e, ids in listings)
    raise ConfigError(f"the servers serve {len(names)} models ({listing}); choose one with "
                      "--model NAME")


def _model_ids(path: str, body: str) -> tuple[str, ...]:
    """The model ids a ``/v1/models`` or ``/get_model_info`` answer names."""
    data = _json_object(body)
    if data is None:
        return ()
    if path == SGLANG_MODEL_INFO:
        name = data.get("served_model_name") or data.get("model_path")
        return (str(name),) if name else ()
    rows = data.get("data")
    if not isinstance(rows, list):
        return ()
    return tuple(str(r["id"]) for r in rows if isinstance(r, dict) and r.get("id"))


def _json_object(body: str) -> dict[str, Any] | None:
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


async def resolve_served_model(endpoints: Sequence[str], backend: Backend | str = Backend.VLLM,
                               transport: Transport | None = None,
                               timeout_s: float = 10.0) -> str:
    """The one model served by all ``endpoints`` (``HttpPieceRunner.resolve_model``), asked
    over ``transport`` (default: a new one, closed after) within ``timeout_s`` per request."""
    runner = HttpPieceRunner(endpoints, backend, transport=transport, health_timeout_s=timeout_s)
    try:
        return await runner.resolve_model()
    finally:
        if transport is None:
            await runner.aclose()
