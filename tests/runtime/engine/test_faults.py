"""The one fault classifier (``runtime.engine.faults``): what each engine answer means, the same on
every path; and the stall watch's decisions on a fake clock (``runtime.execution.stall_watch``)."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any

import pytest

from tailsieve.errors import ConfigError
from tailsieve.model.profiles import builtin_profile
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.runtime.engine.backends import PromptInput, SamplingParams
from tailsieve.runtime.engine.faults import (
    ReplicaDownError,
    ReplicaStalledError,
    RequestError,
    check_chunk,
    check_finished,
    check_status,
    engine_abort,
    engine_error,
    from_exception,
    refused,
)
from tailsieve.runtime.engine.http_runner import HttpPieceRunner
from tailsieve.runtime.engine.pieces import piece_reason
from tailsieve.runtime.engine.streamed import StreamedPiece, finished
from tailsieve.runtime.engine.transport import JSON
from tailsieve.runtime.execution.chain import ResponseChain
from tailsieve.runtime.execution.stall_watch import StallSettings, StallWatch, piece_time_s
from tailsieve.runtime.step.chain_attempt import ChainedAttempt
from tailsieve.runtime.step.executor_config import ExecutorConfig
from tailsieve.runtime.step.waste import AttemptProgress

VLLM_ERROR = {"error": {"message": "EngineCore encountered an issue. See stack trace.",
                        "type": "InternalServerError", "param": None, "code": 500}}
OLD_VLLM_ERROR = {"object": "error", "message": "worker died", "type": "x", "code": 500}


@pytest.mark.parametrize("chunk", [VLLM_ERROR, OLD_VLLM_ERROR, {"error": "boom"}])
def test_the_engines_error_message_in_a_stream_is_a_replica_fault(chunk: JSON) -> None:
    assert engine_error(chunk)
    with pytest.raises(ReplicaDownError, match="engine's error"):
        check_chunk("http://r0/v1/completions", chunk)


@pytest.mark.parametrize("chunk", [
    {"choices": [{"index": 0, "text": "a", "finish_reason": None}]},
    {"choices": [], "usage": {"completion_tokens": 3}},  # vLLM's usage chunk
    {"text": "ab", "meta_info": {"completion_tokens": 2}},  # SGLang
])
def test_ordinary_chunks_are_not_errors(chunk: JSON) -> None:
    assert engine_error(chunk) is None
    check_chunk("u", chunk)


def test_a_stream_cut_before_a_finish_reason_is_a_replica_fault_never_finished() -> None:
    check_finished("w", {0: "stop", 1: "length"}, range(2))
    with pytest.raises(ReplicaDownError, match=r"without a finish reason for responses \[1\]"):
        check_finished("w", {0: "stop", 1: ""}, range(2))
    with pytest.raises(ReplicaDownError, match=r"\[0\]"):  # no choice at all
        check_finished("w", {}, range(1))
    piece = StreamedPiece()
    piece.add({"choices": [{"text": "a", "token_ids": [5]}]}, "w")
    with pytest.raises(ReplicaDownError):  # the session gateway's streamed pieces agree
        finished(piece, "w")


def test_statuses_and_exceptions() -> None:
    with pytest.raises(ReplicaDownError):
        check_status("u", 503, "")
    with pytest.raises(ReplicaDownError):
        check_status("u", 500, "EngineDeadError: gone")
    with pytest.raises(RequestError) as err:
        check_status("u", 500, "oops")
    assert err.value.retryable
    with pytest.raises(RequestError) as err:
        check_status("u", 400, "bad")
    assert not err.value.retryable and err.value.server_message is None
    for body in ('{"error": {"message": "too long"}}', '{"message": "too long"}',
                 '{"detail": "too long"}'):  # vLLM, older vLLM, FastAPI
        with pytest.raises(RequestError) as err:
            check_status("u", 400, body)
        assert err.value.server_message == "too long"
    check_status("u", 200, "")
    assert isinstance(from_exception("u", TimeoutError()), ReplicaDownError)
    assert isinstance(from_exception("u", ConnectionResetError()), ReplicaDownError)
    cause = ConnectionRefusedError()
    wrapped = ReplicaDownError("u: cannot connect")
    wrapped.__cause__ = cause
    assert refused(wrapped) and not refused(ReplicaDownError("u: reset"))


class _ErrorStream:
    """A transport whose stream is what vLLM's front end sends when its worker died: one
    error chunk (raised by the transport's classifier), or choices without a finish reason."""

    def __init__(self, chunks: list[JSON]) -> None:
        self.chunks = chunks
        self.num_posts = 0

    async def post_json(self, url: str, payload: JSON, timeout_s: float | None) -> Any:
        raise AssertionError("streamed only")

    async def stream_json(self, url: str, payload: JSON, timeout_s: float | None) -> Any:
        self.num_posts += 1
        for c in self.chunks:
            check_chunk(url, c)  # as AiohttpTransport does with every chunk
            yield c

    async def get(self, url: str, timeout_s: float | None) -> tuple[int, str]:
        return 200, ""

    async def aclose(self) -> None:
        pass


@pytest.mark.parametrize("chunks", [
    [VLLM_ERROR],  # the test_vllm_kill failure: "stream ended with choices [] of 1"
    [{"choices": [{"index": 0, "text": "a", "token_ids": [1], "finish_reason": None}]}],
])
async def test_single_turn_attempt_reads_a_dead_workers_stream_as_replica_down(
        chunks: list[JSON]) -> None:
    """Before: a request error, retried on the dead server, and the step failed (or, with
    every choice and no finish reason, accepted as finished for an "unknown" reason)."""
    t = _ErrorStream(chunks)
    cfg = ExecutorConfig(model="m", stream=True, sampling=SamplingParams(max_tokens=4))
    runner = HttpPieceRunner(["http://r0"], model="m", transport=t, stream=True)
    att, told = _whole(runner, cfg)
    with pytest.raises(ReplicaDownError):
        await att.run()
    assert t.num_posts == 1 and told == [(0,)]  # not retried on the same server: elsewhere


def _whole(runner: HttpPieceRunner, cfg: ExecutorConfig,
           ) -> tuple[ChainedAttempt, list[tuple[int, ...]]]:
    """A one-response attempt without continuation whose faults end it (each told to its
    ``relocate``, recorded: the samples it would restart elsewhere)."""
    told: list[tuple[int, ...]] = []

    def relocate(samples: object, replica: int, url: str, exc: BaseException) -> int:
        told.append(tuple(samples))  # type: ignore[call-overload]
        raise exc

    prompt = PromptInput("p", token_ids=(1, 2))
    chain = ResponseChain(cfg.sampling.max_tokens, prompt.token_ids)
    return ChainedAttempt(runner, [0], cfg, prompt, [chain], None, AttemptProgress(),
                          relocate), told


class _NoReason(_ErrorStream):
    """A server that answers a whole (non-streamed) response without a finish reason."""

    async def post_json(self, url: str, payload: JSON, timeout_s: float | None) -> Any:
        self.num_posts += 1
        return {"choices": [{"index": 0, "text": "a", "token_ids": [1], "finish_reason": None}]}


async def test_a_whole_response_without_a_finish_reason_is_a_replica_fault() -> None:
    """Not a finished response and not a step failure: the response starts again elsewhere,
    as it does for a stream cut before its end."""
    t = _NoReason([])
    cfg = ExecutorConfig(model="m", stream=False, sampling=SamplingParams(max_tokens=4))
    runner = HttpPieceRunner(["http://r0"], model="m", transport=t, stream=False)
    att, told = _whole(runner, cfg)
    with pytest.raises(ReplicaDownError, match="without a finish reason"):
        await att.run()
    assert t.num_posts == 1 and told == [(0,)]


class _ToolCalls(_ErrorStream):
    """A chat server that ends a whole response by its own choice (a tool call)."""

    async def post_json(self, url: str, payload: JSON, timeout_s: float | None) -> Any:
        self.num_posts += 1
        return {"choices": [{"index": 0, "text": "a", "token_ids": [1],
                             "finish_reason": "tool_calls"}]}


async def test_a_chat_servers_own_end_is_a_finished_response_not_a_fault() -> None:
    """"tool_calls" / "content_filter" end the response: it is delivered as stopped (a fault
    would take every replica out in turn, each ending it the same way)."""
    t = _ToolCalls([])
    cfg = ExecutorConfig(model="m", stream=False, sampling=SamplingParams(max_tokens=4))
    runner = HttpPieceRunner(["http://r0"], model="m", transport=t, stream=False)
    att, told = _whole(runner, cfg)
    (resp,) = await att.run()
    assert resp.finish_reason == "stop" and resp.token_ids == (1,) and t.num_posts == 1
    assert not told
    assert [piece_reason(r) for r in ("stop", "length", "content_filter", "abort", None,
                                      "unknown")] == ["stop", "length", "stop", "abort",
                                                      "abort", "abort"]


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


COST = ReplicaConfig.from_profile(builtin_profile("cpu"))


def _sweep(watch: StallWatch) -> list[Hashable]:
    """Stop every piece of each suspect replica, unconfirmed (``run`` without probes)."""
    hung = watch.suspects()
    for r in hung:
        watch.stop(r)
    return hung


def test_stall_limits_come_from_the_cost_model_with_a_floor() -> None:
    st = StallSettings(factor=2.0, floor_s=1.0)
    expected = piece_time_s(COST, 1, 0.0, 0, 1000)
    assert expected == pytest.approx(1000 * COST.throughput.tau(1))
    assert st.limit_s(expected) == pytest.approx(2 * expected)
    assert st.limit_s(0.01) == 1.0
    queued = ReplicaConfig.from_profile(builtin_profile("cpu"), max_num_seqs=2)
    assert piece_time_s(queued, 5, 0.0, 0, 100) == pytest.approx(  # 3 waves of 2
        3 * 100 * COST.throughput.tau(2))
    with pytest.raises(ConfigError, match="floor_s"):
        StallSettings(floor_s=0)


def test_a_replica_without_progress_is_hung_and_all_its_pieces_stop() -> None:
    clock = _Clock()
    watch = StallWatch(StallSettings(factor=2.0, floor_s=0.5), lambda r: COST, clock)
    stopped: list[str] = []
    streamed = {"b": 0}
    watch.start("a", 0, 10, 100, lambda: stopped.append("a"))
    watch.start("b", 0, 10, 100, lambda: stopped.append("b"), lambda: streamed["b"])
    limit = StallSettings(factor=2.0, floor_s=0.5).limit_s(piece_time_s(COST, 2, 20, 10, 100))
    clock.t = limit * 0.5
    watch.start("c", 1, 10, 100, lambda: stopped.append("c"))  # sent later, elsewhere
    clock.t = limit * 0.9
    streamed["b"] = 7  # progress on replica 0 ...
    assert _sweep(watch) == [] and stopped == []
    clock.t = limit * 1.05  # ... but "a" has made none for longer than its limit
    assert _sweep(watch) == [0]
    assert sorted(stopped) == ["a", "b"]  # every piece of the hung replica, not replica 1's
    assert watch.end("a") and watch.end("b") and not watch.end("c")
    assert _sweep(watch) == [] and watch.num_stalls == 1


def test_streamed_progress_keeps_a_long_piece_alive() -> None:
    clock = _Clock()
    watch = StallWatch(StallSettings(floor_s=1.0), lambda r: COST, clock)
    tokens = [0]
    watch.start("a", 0, 0, 10, lambda: pytest.fail("stopped"), lambda: tokens[0])
    for _ in range(20):  # ten times its limit in all, a token each second
        clock.t += 0.9
        tokens[0] += 1
        assert _sweep(watch) == []
    assert not watch.end("a")


async def test_watched_raises_stalled_and_an_outer_cancel_stays_a_cancel() -> None:
    clock = _Clock()
    watch = StallWatch(StallSettings(floor_s=1.0), lambda r: COST, clock)
    never = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(watch.watched("k", 3, 0, 1, never))
    await asyncio.sleep(0)
    clock.t = 100.0
    assert _sweep(watch) == [3]
    with pytest.raises(ReplicaStalledError, match="replica 3"):
        await task
    never2 = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(watch.watched("k2", 3, 0, 1, never2))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert never2.cancelled()


async def test_a_cut_streamed_piece_keeps_what_it_streamed_for_the_continuation() -> None:
    """The session gateway's runner: a stream cut without a finish reason is a replica fault
    that carries the tokens received, so the turn continues after them elsewhere."""
    from tailsieve.runtime.sessions import HttpPieceRunner, PieceRequest

    chunks = [{"choices": [{"index": 0, "text": f"t{i}", "token_ids": [10 + i],
                            "finish_reason": None}]} for i in range(3)]
    runner = HttpPieceRunner(["http://r0"], model="m", transport=_ErrorStream(chunks),
                             stream=True)
    piece = PieceRequest(prompt_ids=(1, 2), sampling=SamplingParams(max_tokens=8),
                         max_tokens=8, request_id="s-t1-0")
    with pytest.raises(ReplicaDownError) as err:
        await runner.run_piece(0, piece)
    assert err.value.partial.token_ids == (10, 11, 12)
    assert err.value.partial.text == "t0t1t2"


async def test_a_suspect_that_answers_its_probe_is_slow_not_hung() -> None:
    """Past its limit a replica is probed: one that answers keeps its pieces (a loaded
    machine is not a hung server), one that does not loses them to the others."""
    clock = _Clock()
    watch = StallWatch(StallSettings(floor_s=1.0, check_interval_s=0.001), lambda r: COST,
                       clock)
    stopped: list[str] = []
    alive = {0: True, 1: False}
    probed: list[int] = []
    told: list[int] = []

    async def answers(r: object) -> bool:
        assert isinstance(r, int)
        probed.append(r)
        return alive[r]

    watch.start("a", 0, 0, 1, lambda: stopped.append("a"))
    watch.start("b", 1, 0, 1, lambda: stopped.append("b"))
    clock.t = 50.0
    def on_stall(r: object, e: object) -> None:
        assert isinstance(r, int)
        told.append(r)

    loop = asyncio.ensure_future(watch.run(on_stall, answers))
    while not told:
        await asyncio.sleep(0.001)
    loop.cancel()
    assert stopped == ["b"] and told == [1] and sorted(set(probed)) == [0, 1]
    assert watch.suspects() == []  # replica 0 was spared: a new limit from its probe
    assert not watch.end("a") and watch.end("b")


TOO_LONG = ("The input (5000 tokens) is longer than the model's context length (4096 "
            "tokens).")
REFUSED = {"type": "abort", "message": TOO_LONG, "status_code": 400,
           "err_type": "BadRequestError"}  # SGLang's FINISH_ABORT of a request it refuses
ASKED = {"type": "abort", "message": "Aborted"}  # what its /abort_request ends a request with


def _sglang_item(ids: list[int], reason: JSON) -> JSON:
    return {"text": "x" * len(ids), "output_ids": ids,
            "meta_info": {"completion_tokens": len(ids), "prompt_tokens": 2,
                          "finish_reason": reason}}


class _Sglang:
    """SGLang replicas behind ``Transport``: ``/generate`` answers ``reasons[prompt]`` (the
    prompt is its text) whole or as one streamed chunk; an ``/abort_request`` ends a request
    held in ``hold`` as SGLang does ("Aborted", what it generated so far)."""

    def __init__(self, reasons: dict[str, JSON], hold: bool = False) -> None:
        self.reasons = reasons
        self.hold = hold
        self.aborted = asyncio.Event()
        self.posts: list[str] = []

    def _answer(self, payload: JSON) -> JSON:
        reason = self.reasons.get(payload.get("text", ""), {"type": "stop"})
        n = 0 if reason.get("type") == "abort" else 3
        return _sglang_item(list(range(1, n + 1)), reason)

    async def post_json(self, url: str, payload: JSON, timeout_s: float | None) -> Any:
        self.posts.append(url)
        if url.endswith("/abort_request"):
            self.aborted.set()
            return None
        if self.hold:
            await self.aborted.wait()
            return _sglang_item([7, 8], ASKED)
        return self._answer(payload)

    async def stream_json(self, url: str, payload: JSON, timeout_s: float | None) -> Any:
        self.posts.append(url)
        yield self._answer(payload)

    async def get(self, url: str, timeout_s: float | None) -> tuple[int, str]:
        return 200, ""

    async def aclose(self) -> None:
        pass


def test_sglangs_abort_of_a_request_it_refuses_is_a_request_error() -> None:
    with pytest.raises(RequestError, match="context length") as err:
        engine_abort("u", REFUSED)
    assert err.value.status == 400 and not err.value.retryable
    with pytest.raises(ReplicaDownError):  # overloaded / going away, as an HTTP 503
        engine_abort("u", {**REFUSED, "status_code": 503})
    for passes in (ASKED, {"type": "abort"}, {"type": "stop"}, "abort", None):
        engine_abort("u", passes)
    with pytest.raises(RequestError, match="refused the request: bad") as err:  # its front end
        check_chunk("http://r0/generate", {"error": {"message": "bad"}})
    assert not isinstance(err.value, ReplicaDownError) and not err.value.retryable


@pytest.mark.parametrize("stream", [False, True])
async def test_a_step_whose_response_sglang_refuses_fails_with_its_message(
        stream: bool) -> None:
    """Before: the abort read as a replica fault, the group went to each replica in turn and
    the step failed with "no healthy replica left", the server's message lost."""
    from tailsieve.core.plan import GroupAssignment, StepPlan
    from tailsieve.core.pool import Pool
    from tailsieve.errors import StepFailedError
    from tailsieve.runtime.engine.backends import Backend
    from tailsieve.runtime.step.executor import LiveExecutor

    plan = StepPlan(step=1, num_replicas=2, group_size=2, num_required=2, q=0, m=0,
                    num_extra=0, tail_replicas=(), bulk_replicas=(0, 1),
                    assignments=(GroupAssignment("ok", Pool.BULK, 0, True, 0),
                                 GroupAssignment("long", Pool.BULK, 1, True, 0)),
                    num_fresh_to_deliver=0, fresh_prompt_ids=(), is_warmup=False,
                    is_flush=False)
    prompts = {p: PromptInput(p, text=p) for p in ("ok", "long")}
    t = _Sglang({"long": REFUSED})
    cfg = ExecutorConfig(model="m", backend=Backend.SGLANG, stream=stream, backoff_s=0.001,
                         sampling=SamplingParams(max_tokens=8))
    ex = LiveExecutor(["http://r0", "http://r1"], cfg, transport=t)
    try:
        with pytest.raises(StepFailedError, match=r"replica 1 .*HTTP 400.*context length"):
            await ex.run(plan, prompts)
        assert all(ex.health.healthy)  # no replica taken out
        assert t.posts.count("http://r1/generate") <= 2  # its two responses, not retried
    finally:
        await ex.aclose()


async def test_an_abort_the_router_asked_for_still_ends_the_piece_early() -> None:
    """A piece SGLang aborts at our /abort_request (a move) returns what it generated, as
    before: "Aborted" carries no status."""
    from tailsieve.runtime.engine.backends import Backend
    from tailsieve.runtime.engine.pieces import PieceRequest

    t = _Sglang({}, hold=True)
    runner = HttpPieceRunner(["http://r0"], Backend.SGLANG, transport=t)
    task = asyncio.ensure_future(runner.run_piece(0, PieceRequest(
        (1, 2), SamplingParams(max_tokens=50), 50, "g-0")))
    while not t.posts:
        await asyncio.sleep(0)
    runner.interrupt(0, "g-0")
    out = await task
    assert out.finish_reason == "abort" and out.token_ids == (7, 8)
    assert out.piece(0).finish_reason == "moved"
    await runner.aclose()
