"""Moves are on by default wherever they can run: the Python API and the CLI, on vLLM's and
SGLang's APIs; ``moves=False`` / ``--no-moves`` gives plans without moves (round-robin
dealing); where moves cannot run they are off and the config says why."""

from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from tailsieve.cli.main import main
from tailsieve.errors import ConfigError
from tailsieve.runtime.emulator import EmulatorConfig, EmulatorFleet, EmulatorServer
from tailsieve.runtime.engine.backends import Backend, PromptInput, SamplingParams
from tailsieve.runtime.execution.moves import PIECE_TOKENS, MoveSettings
from tailsieve.runtime.sessions import GatewayConfig, SessionGateway
from tailsieve.runtime.step.observe import StepMetrics
from tailsieve.runtime.step.replay import ReplayLengths
from tailsieve.runtime.step.rollout import TailSieveRollout
from tailsieve.runtime.step.rollout_config import RolloutConfig
from tailsieve.runtime.stub import StubPieceRunner, StubTransport

MODEL = "tailsieve-emulated"


def test_one_piece_cap_rule_for_the_step_and_the_gateway() -> None:
    """Pieces of PIECE_TOKENS where a move waits for a piece's end, one piece where the
    runner ends it at once, the given cap always: for the step and the gateway alike."""
    assert MoveSettings().piece_cap(False) == PIECE_TOKENS
    assert MoveSettings().piece_cap(True) is None
    assert MoveSettings(piece_tokens=64).piece_cap(True) == 64
    assert RolloutConfig(num_groups=1).piece_tokens == PIECE_TOKENS  # unstreamed vLLM
    assert RolloutConfig(num_groups=1, backend=Backend.SGLANG).piece_tokens is None
    assert RolloutConfig(num_groups=1, stream=True).piece_tokens is None
    gw = SessionGateway(2, StubPieceRunner(2), GatewayConfig())
    assert gw.moves.piece_tokens(True) == PIECE_TOKENS and gw.moves.piece_tokens(False) is None
    gw = SessionGateway(2, StubPieceRunner(2), GatewayConfig(piece_tokens=64))
    assert gw.moves.piece_tokens(True) == 64 and gw.moves.piece_tokens(True, streamed=True) is None
    gw = SessionGateway(2, StubPieceRunner(2, interrupts=True), GatewayConfig())
    assert gw.moves.piece_tokens(True) is None  # a move ends the running piece at once


@pytest.mark.parametrize("backend", [Backend.VLLM, Backend.SGLANG, Backend.VLLM_CHAT])
def test_defaults_move_on_backends_that_continue(backend: Backend) -> None:
    cfg = RolloutConfig(num_groups=4, backend=backend)
    assert cfg.moves and cfg.moves_active and cfg.moves_off_reason is None
    assert cfg.continuation is True
    ex = cfg.executor_config()
    assert ex.continuation
    # vLLM without streaming: a move waits for the running piece's end, so pieces are bounded;
    # SGLang aborts the running request by id and keeps its output: one piece until moved
    assert ex.piece_tokens == (None if backend is Backend.SGLANG else PIECE_TOKENS)
    # chat prompts go as token ids on the completions API, where a response can be continued
    assert cfg.chat_as_tokens == (backend is Backend.VLLM_CHAT)
    assert ex.backend is (Backend.VLLM if backend is Backend.VLLM_CHAT else backend)
    plain = RolloutConfig(num_groups=4, backend=backend, moves=False)
    assert not plain.chat_as_tokens and plain.executor_config().backend is backend
    streamed = RolloutConfig(num_groups=4, backend=backend, stream=True)
    if backend is Backend.SGLANG:  # a streamed SGLang piece cannot be cut and continued
        assert not streamed.moves_active and "SGLang" in (streamed.moves_off_reason or "")
        assert not streamed.executor_config().continuation
    else:
        assert streamed.moves_active and streamed.piece_tokens is None


def test_no_moves_means_no_continuation_and_plain_requests() -> None:
    off = RolloutConfig(num_groups=4, moves=False)
    assert not off.moves_active and off.moves_off_reason == "moves=False"
    assert off.continuation is False and off.piece_tokens is None
    # continuation alone (a fault loses only a piece), no moves
    chains = RolloutConfig(num_groups=4, moves=False, continuation=True, piece_tokens=64)
    assert chains.continuation and not chains.moves_active
    with pytest.raises(ConfigError, match="piece_tokens=64 needs continuation"):
        RolloutConfig(num_groups=4, moves=False, piece_tokens=64)


def test_one_request_per_group_is_refused_with_moves_and_honoured_without() -> None:
    """``split_groups=False`` (``--no-split``) cannot be honoured while every response is its
    own chain (moves on, or continuation): a clear error, not a silent n requests."""
    for kw in ({}, {"moves": False, "continuation": True}):
        with pytest.raises(ConfigError, match=r"split_groups=False .* --no-moves"):
            RolloutConfig(num_groups=4, split_groups=False, **kw)  # type: ignore[arg-type]
    for kw in ({"moves": False}, {"policy": "uniform"}):
        cfg = RolloutConfig(num_groups=4, split_groups=False, **kw)  # type: ignore[arg-type]
        assert not cfg.continuation and not cfg.executor_config().split_groups


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        ({"policy": "uniform-requests"}, "does not move"),
        ({"policy": "uniform"}, "does not move"),
        ({"sampling": SamplingParams(presence_penalty=0.5)}, "presence_penalty=0.5"),
        ({"backend": Backend.SGLANG, "sampling": SamplingParams(stop=("</answer>",))},
         "stop strings on SGLang"),
        ({"continuation": False}, "continuation=False"),
    ],
)
def test_moves_off_where_they_cannot_run_and_the_reason_says_why(
    kw: dict[str, object], reason: str
) -> None:
    cfg = RolloutConfig(num_groups=4, **kw)  # type: ignore[arg-type]
    assert not cfg.moves_active
    assert cfg.moves_off_reason is not None and reason in cfg.moves_off_reason
    assert cfg.piece_tokens is None


def test_the_controller_balances_only_when_moves_run() -> None:
    """The plans of ``tailsieve`` carry balance settings (a step may move) exactly when moves
    run; with ``moves=False`` its m = 0 plans deal responses round-robin with nothing to move."""
    urls = ["http://r0", "http://r1"]
    stub = StubTransport(lambda p, s: 10, seconds_per_token=0.0001)
    on = TailSieveRollout(urls, RolloutConfig(num_groups=4, model="m"), transport=stub)
    off = TailSieveRollout(urls, RolloutConfig(num_groups=4, model="m", moves=False),
                           transport=stub)
    assert on.executor.balance_costs is not None and off.executor.balance_costs is None
    stream = iter(f"p{i}" for i in range(100))
    from tailsieve.core.stream import PromptStream

    plan_on = on.protocol.plan_step(PromptStream(stream))
    plan_off = off.protocol.plan_step(PromptStream(stream))
    assert plan_on.m == plan_off.m == 0
    assert plan_on.balance is not None and plan_off.balance is None
    # round-robin dealing: each group's responses over both replicas, in turn
    for a in plan_off.assignments:
        assert len(set(a.all_replicas)) == 2


def _lengths() -> ReplayLengths:
    """A skewed step: one long group in four, the rest short."""
    table = {f"q{i}": tuple((900 if i % 4 == 0 else 60) + 13 * s for s in range(4))
             for i in range(120)}
    return ReplayLengths(table)


async def _run(backend: Backend, moves: bool, steps: int = 4) -> list[StepMetrics]:
    """Steps of a skewed workload on three emulated replicas (one at half speed); every group
    delivered once with its forced lengths. vllm-chat prompts are messages."""
    rl = _lengths()
    cfgs = [EmulatorConfig.from_profile("cpu", time_scale=0.5, seed=i, model_name=MODEL,
                                        slowdown=2.0 if i == 0 else 1.0) for i in range(3)]
    out: list[StepMetrics] = []
    async with contextlib.AsyncExitStack() as stack:
        servers = [await stack.enter_async_context(EmulatorServer(c)) for c in cfgs]
        cfg = RolloutConfig(num_groups=8, group_size=4, backend=backend, replay=rl,
                            sampling=SamplingParams(max_tokens=2000), moves=moves,
                            controller={"seam_s": 0.0})
        ro = await stack.enter_async_context(TailSieveRollout([s.url for s in servers], cfg))
        # SGLang does not echo a text prompt's token ids: a continuation needs them
        chat = backend is Backend.VLLM_CHAT
        source = [PromptInput(p.prompt_id, messages=({"role": "user", "content": f"Solve {i}."},))
                  if chat else PromptInput(p.prompt_id, token_ids=(1, 2, 3, i))
                  for i, p in enumerate(rl.prompts())]
        seen: set[str] = set()
        for _ in range(steps):
            need = ro.num_fresh_needed()
            new, source = source[:need], source[need:]
            batch = await ro.step(new)
            for g in batch.groups:
                assert g.prompt_id not in seen
                seen.add(g.prompt_id)
                assert [r.num_tokens for r in g.responses] == [rl(g.prompt_id, i)
                                                               for i in range(4)]
            out.append(batch.metrics)
    return out


@pytest.mark.parametrize("backend", [Backend.VLLM, Backend.SGLANG, Backend.VLLM_CHAT])
async def test_api_rollout_moves_by_default(backend: Backend) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no seed: no warning about seeds across seams
        steps = await _run(backend, moves=True)
    assert any(m.moves for m in steps)
    print(f"\n{backend.value}: moves per step {[m.num_moves for m in steps]}")
    assert sum(m.num_moves for m in steps) > 0, [m.num_moves for m in steps]
    assert all(m.wasted_tokens == 0 for m in steps)


async def test_api_rollout_without_moves_never_moves() -> None:
    steps = await _run(Backend.VLLM, moves=False, steps=3)
    assert not any(m.moves for m in steps) and sum(m.num_moves for m in steps) == 0


@pytest.fixture(scope="module")
def slow_fleet() -> object:
    f = EmulatorFleet.start(3, profile="cpu", time_scale=0.5, model_name=MODEL,
                            overrides=[{"slowdown": 2.0}, {}, {}])
    try:
        yield f
    finally:
        f.close()


def _cli(fleet: EmulatorFleet, out: Path, backend: str, *flags: str) -> dict[str, object]:
    prompts = out.parent / f"prompts-{out.name}.jsonl"
    prompts.write_text("".join(
        json.dumps({"prompt_id": f"q{i}", "prompt_token_ids": [1, 2, 3, i]}) + "\n"
        for i in range(120)))  # fmt: skip
    rc = main(["rollout", "--endpoints", ",".join(fleet.urls), "--prompts", str(prompts),
               "--groups", "6", "--group-size", "4", "--steps", "4", "--backend", backend,
               "--model", MODEL, "--max-tokens", "400", "--seam-s", "0", "--out", str(out),
               *flags])  # fmt: skip
    assert rc == 0
    summary: dict[str, object] = json.loads((out / "summary.json").read_text())
    return summary


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_cli_rollout_moves_by_default(slow_fleet: EmulatorFleet, tmp_path: Path,
                                      backend: str) -> None:
    on = _cli(slow_fleet, tmp_path / "on", backend)
    assert on["moves"] is True and on["moves_off_reason"] is None
    steps = [json.loads(x) for x in (tmp_path / "on" / "steps.jsonl").read_text().splitlines()]
    assert any(s["moves"] for s in steps)
    off = _cli(slow_fleet, tmp_path / "off", backend, "--no-moves")
    assert off["moves"] is False and off["moves_off_reason"] == "moves=False"
    assert off["num_moves"] == 0
    steps = [json.loads(x) for x in (tmp_path / "off" / "steps.jsonl").read_text().splitlines()]
    assert not any(s["moves"] for s in steps)


async def test_chat_prompts_are_tokenized_by_the_server_and_a_failure_is_named() -> None:
    """``/tokenize`` gives a chat prompt the ids the chat endpoint would generate from; a
    server that cannot tokenize is named in one line."""
    from tailsieve.errors import ReplicaError
    from tailsieve.runtime.emulator.protocol import _chat_ids
    from tailsieve.runtime.engine.faults import RequestError
    from tailsieve.runtime.step.executor import ExecutorConfig, LiveExecutor
    from tailsieve.runtime.stub import StubTransport

    class NoTokenize(StubTransport):
        async def post_json(self, url: str, payload: Any, timeout_s: float | None) -> Any:
            raise RequestError(f"{url}: HTTP 404", status=404, retryable=False)

    msgs = ({"role": "user", "content": "What is 2 + 3?"},)
    prompts = {"a": PromptInput("a", messages=msgs), "b": PromptInput("b", token_ids=(5,))}
    async with EmulatorServer(EmulatorConfig.from_profile("cpu", model_name=MODEL)) as s:
        ex = LiveExecutor([s.url], ExecutorConfig(model=MODEL))
        try:
            got = await ex.chat_as_tokens(prompts)
        finally:
            await ex.aclose()
    assert got["a"].messages is None and got["a"].token_ids == _chat_ids(list(msgs))[0]
    assert got["b"].token_ids == (5,)
    ex = LiveExecutor(["http://r0"], ExecutorConfig(model=MODEL),
                      transport=NoTokenize(lambda p, i: 4))
    with pytest.raises(ReplicaError, match="tokenize chat prompt 'a'"):
        await ex.chat_as_tokens(prompts)
