"""The proxy's core: a client request run as sessions' turns at the ``SessionGateway``.

``ProxyService.start`` tokenizes the request's prompts (``Tokenizer``; with ``text_prompts``,
a plain-text completions prompt is instead sent to its server as text, which tokenizes it and
echoes its ids: ``text_prompts.TextPrompts``), gives each of its ``n x prompts`` samples a
session (``ClientSessions``: sticky by the client's key) and runs each as one turn
(``SessionGateway.generate``: placed, pieced, moved, healed). The ``request_run.RequestRun`` it
returns collects the samples' tokens as they stream in (``LiveTokens``: a streamed request's
turns run as streamed pieces, relayed chunk by chunk) and their final outputs (views over each
turn's chain; ``SampleTrace`` keeps the pieces as they end for a sample aborted before its
end); one failed sample fails the request (the others are cancelled, nothing is delivered).
``abort`` ends running samples early with what they generated so far (finish reason "abort"),
as SGLang's ``/abort_request`` does. A request that arrives while
nothing runs starts a new rollout step at the gateway (``begin_step``: the re-balance horizon
restarts), and the last one to end closes it (``end_step``: its time is the next step's
expected time), since a trainer's step is a burst of requests after an idle gap. The balance
gate is fed from windows of turns instead of steps (``control.pace_window``): each window's
turns run with moves on or off as the gate decides, and its seconds per output token is the
gate's measure, so moves switch off where they are measured slower and back on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from tailsieve.control.pace_window import PaceWindows
from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.runtime.engine.backends import Backend
from tailsieve.runtime.engine.pieces import PieceOutput, TokenDelta
from tailsieve.runtime.engine.transport import RequestError
from tailsieve.runtime.execution.chain import ChainError
from tailsieve.runtime.execution.result import PieceSpan, TurnResult
from tailsieve.runtime.proxy.api_error import (
    ApiError,
    bad_gateway,
    bad_request,
    not_found_model,
    unavailable,
)
from tailsieve.runtime.proxy.request import ProxyRequest, default_max, fit_context
from tailsieve.runtime.proxy.request_run import RequestRun
from tailsieve.runtime.proxy.text_prompts import TextPrompts
from tailsieve.runtime.proxy.tokenizer import Tokenizer
from tailsieve.runtime.sessions.gateway import SessionGateway
from tailsieve.runtime.tasks import BackgroundTask
from tailsieve.session.client_table import ClientSessions, Lease

log = logging.getLogger(__name__)

PieceHook = Callable[[Hashable, PieceSpan], None]


@dataclass(frozen=True, slots=True)
class ServedModel:
    """The model the servers serve."""

    name: str
    max_model_len: int | None = None  # prompt + output limit (None: unknown)
    card: Mapping[str, Any] | None = None  # the servers' /v1/models answer, as they gave it


class ProxyService:
    """Runs requests over ``gateway`` (entered by the caller); see the module docstring."""

    def __init__(self, gateway: SessionGateway, tokenizer: Tokenizer, served: ServedModel,
                 backend: Backend = Backend.VLLM, table: ClientSessions | None = None,
                 gate_window_turns: int = 256, text_prompts: bool = True) -> None:
        self.gateway = gateway
        self.tokenizer = tokenizer
        self.served = served
        self.backend = Backend(backend)
        self.table = table or ClientSessions()
        self.windows = PaceWindows(gateway.gate, gate_window_turns)
        self.text = TextPrompts(text_prompts, self.backend)
        self.runs: set[RequestRun] = set()
        self.on_piece: PieceHook | None = None  # told of every piece (tests move turns here)
        self.num_requests = 0
        self.num_aborted_samples = 0
        self._expiry = BackgroundTask("proxy-session-expiry")

    # -- lifecycle -----------------------------------------------------------------------

    def start_expiry(self) -> None:
        """Forget session keys idle for the table's ``ttl_s`` (checked every ttl / 8)."""
        self._expiry.start(self._expire_loop)

    async def aclose(self) -> None:
        """Stop every running request (nothing more is delivered), wait for their samples to
        end, and stop the expiry sweep."""
        runs = list(self.runs)
        for run in runs:
            run.cancel()
        await asyncio.gather(*(t for run in runs for t in run.tasks), return_exceptions=True)
        await self._expiry.aclose()

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(min(self.table.ttl_s / 8, 60.0))
            for sid in self.table.expire(time.monotonic()):
                self.gateway.end_session(sid)

    # -- requests ----------------------------------------------------------------------------

    def check_model(self, model: str | None) -> None:
        if model is not None and model != self.served.name:
            raise not_found_model(model, self.served.name)

    @property
    def num_running_samples(self) -> int:
        return sum(sum(o is None for o in r.outputs) for r in self.runs if not r.done)

    async def start(self, req: ProxyRequest, key: str | None, group: str | None) -> RequestRun:
        """Tokenize ``req``'s prompts and start its samples (``ApiError`` before any starts:
        a bad request, an unknown model, a prompt the servers refuse, no server)."""
        self.check_model(req.model)
        texts = [None if self.table.needs_prompt(key) else self.text.text_of(req, p)
                 for p in req.prompts]
        ids = [p.token_ids if p.token_ids is not None else () if t is not None else
               await self.tokenizer.tokenize(p.tokenize or {})
               for p, t in zip(req.prompts, texts, strict=True)]
        samplings = [self._sampling(req, len(ids[i // req.n]), i % req.n)
                     for i in range(req.num_samples)]  # a text prompt: its server cuts
        run = RequestRun(req, ids, texts)
        if not any(not r.done for r in self.runs):
            self.gateway.begin_step()
        self.runs.add(run)
        self.num_requests += 1
        now = time.monotonic()
        for i, sp in enumerate(samplings):
            lease = self.table.acquire(key, group, ids[i // req.n], now)
            run.tasks.append(asyncio.create_task(self._sample(run, i, lease, sp)))
        return run

    def finish(self, run: RequestRun) -> None:
        """The request was answered (or dropped): forget it. The last one of a burst ends
        the gateway's step (its time is the next step's horizon estimate; the balance gate
        is fed per window of turns, ``PaceWindows``)."""
        self.runs.discard(run)
        if not any(not r.done for r in self.runs):
            self.gateway.end_step(self.gateway.elapsed(), 0.0)

    def abort(self, rid: str | None = None, abort_all: bool = False) -> int:
        """Abort the running requests with client id ``rid`` (or all); returns how many."""
        hit = [r for r in self.runs if not r.done and (abort_all or (
            rid is not None and r.req.rid == rid))]
        for r in hit:
            r.abort()
        return len(hit)

    def _gate_note(self, note: str) -> None:
        if note:
            log.info("proxy: %s", note)

    def finish_session(self, key: str) -> int:
        """The client ended its session ``key`` (``/finish_session``): its idle sessions end
        at the gateway now, a running one when its turn ends. Returns how many ended now."""
        ended = self.table.finish(key)
        for sid in ended:
            self.gateway.end_session(sid)
        return len(ended)

    def _echoed(self, run: RequestRun, i: int, text: str, result: TurnResult,
                ) -> tuple[int, ...]:
        """Sample ``i``'s text prompt as ids, as its server echoed them (the request's, the
        sample's trace's; learned for the next estimates)."""
        ids = result.prompt_ids
        if not ids:
            raise bad_gateway("a server answered a text prompt without echoing its token ids "
                              "(return_token_ids): start the proxy with --tokenize-prompts")
        p = i // run.req.n
        if not run.prompt_ids[p]:
            run.prompt_ids[p] = ids
        run.traces[i].prompt_ids = ids
        self.text.echoed(text, ids)
        return ids

    def _sampling(self, req: ProxyRequest, prompt_len: int, k: int) -> dict[str, Any]:
        sp: dict[str, Any] = dict(req.sampling)
        mml = self.served.max_model_len
        sp["max_tokens"] = fit_context(
            prompt_len, req.max_tokens or default_max(req.api, prompt_len, mml), mml,
            req.max_tokens_param)
        if req.logprobs is not None:
            sp["logprobs"] = req.logprobs
        if sp.get("seed") is not None and req.n > 1:
            sp["seed"] = int(sp["seed"]) + k  # as a split group does: samples must differ
        if self.backend is Backend.SGLANG:
            _to_sglang(sp)
        return sp

    async def _sample(self, run: RequestRun, i: int, lease: Lease, sp: dict[str, Any]) -> None:
        trace, live = run.traces[i], run.lives[i]
        prompt = trace.prompt_ids
        text = run.texts[i // run.req.n]
        result: TurnResult | None = None
        context: tuple[int, ...] | None = None

        def on_piece(span: PieceSpan, out: PieceOutput) -> None:
            if not trace.prompt_ids and out.prompt_ids:  # a text prompt's, echoed
                trace.prompt_ids = out.prompt_ids
                if not run.prompt_ids[i // run.req.n]:
                    run.prompt_ids[i // run.req.n] = out.prompt_ids
            trace.add(span, out)
            if self.on_piece is not None:
                self.on_piece(lease.session_id, span)

        def on_tokens(start: int, d: TokenDelta) -> None:
            live.grow(start, d)
            run.events.put_nowait(("tokens", i))

        window, note = self.windows.turn_started()
        self._gate_note(note)
        self.gateway.set_step_balanced(self.windows.balanced)
        t0 = time.monotonic()
        try:
            num_prompt = len(prompt) if text is None else self.text.estimate(text)
            result = await self.gateway.generate(
                lease.session_id, lease.group_id, prompt, sp,
                prompt_tokens=num_prompt if lease.first else None, on_piece=on_piece,
                on_tokens=on_tokens if run.req.stream else None, prompt_text=text,
                text_tokens=num_prompt)
            if text is not None:
                prompt = self._echoed(run, i, text, result)
            context = prompt + result.token_ids
        except asyncio.CancelledError:
            if not run.aborted:
                raise
            trace.keep_streamed(live)
            context = (trace.prompt_ids + tuple(trace.token_ids()) if trace.prompt_ids
                       else None)
            self.num_aborted_samples += 1
        except Exception as exc:  # every failure becomes the request's HTTP error
            run.fail(api_error(exc))
            return
        finally:
            timed = result is not None and not run.aborted
            self._gate_note(self.windows.turn_ended(
                window, time.monotonic() - t0,
                len(result.token_ids) if timed and result is not None else None))
            ended = self.table.release(lease, context, time.monotonic())
            if ended is not None:
                self.gateway.end_session(ended)
        out = trace.output(i, result, run.req.stop, run.req.logprobs is not None,
                           time.monotonic() - run.t0)
        run.outputs[i] = out
        run.events.put_nowait(("done", i))


def _to_sglang(sp: dict[str, Any]) -> None:
    """vLLM-named sampling extras in SGLang's names (the known fields are mapped by
    ``runtime.engine.wire_bodies``)."""
    if sp.get("min_tokens"):
        raise bad_request("min_tokens is not supported with SGLang servers behind the proxy "
                          "(a continued piece's floor is kept in vLLM's field)", "min_tokens")
    sp.pop("min_tokens", None)
    if "include_stop_str_in_output" in sp:
        sp["no_stop_trim"] = sp.pop("include_stop_str_in_output")
    for key in ("allowed_token_ids", "return_tokens_as_token_ids", "priority", "cache_salt",
                "vllm_xargs", "stream_interval"):
        sp.pop(key, None)


def api_error(exc: BaseException) -> ApiError:
    """The HTTP error a failed sample answers with."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, RequestError):
        if exc.status is not None and 400 <= exc.status < 500:
            return ApiError(f"a server refused the request: {exc}", 400)
        return bad_gateway(f"a server answered with an error: {exc}")
    if isinstance(exc, ChainError):
        return ApiError(f"the response could not be joined from its pieces: {exc}", 500,
                        "InternalServerError")
    if isinstance(exc, ConfigError):
        return bad_request(str(exc))
    if isinstance(exc, ReplicaError):
        if "no healthy replica" in str(exc):
            return unavailable(f"every server is down: {exc}")
        return bad_gateway(str(exc))
    log.exception("proxy: a sample failed", exc_info=exc)
    return ApiError(f"internal error: {type(exc).__name__}: {exc}", 500, "InternalServerError")
