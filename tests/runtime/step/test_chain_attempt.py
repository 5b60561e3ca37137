"""A step's response runs as a session turn's state (``RunningTurn``): each piece its own
request id (SGLang aborts by id), the prefix, ``min_tokens``, the forced flag and the engine
priority carried from piece to piece, and a replica fault's partial kept; without
continuation, a response is one piece, started again from its prompt after a fault."""

from __future__ import annotations

from tailsieve.runtime.engine.backends import Backend, PromptInput, SamplingParams
from tailsieve.runtime.engine.faults import ReplicaDownError
from tailsieve.runtime.engine.http_runner import HttpPieceRunner
from tailsieve.runtime.engine.pieces import PieceOutput, PieceRequest
from tailsieve.runtime.execution.chain import ResponseChain
from tailsieve.runtime.step.chain_attempt import ChainedAttempt
from tailsieve.runtime.step.executor_config import ExecutorConfig
from tailsieve.runtime.step.waste import AttemptProgress


class Scripted(HttpPieceRunner):
    """Answers each piece with the next scripted output (a ``ReplicaDownError`` is raised)."""

    def __init__(self, script: list[PieceOutput | ReplicaDownError]) -> None:
        super().__init__(["http://r0", "http://r1"], Backend.SGLANG, "m")
        self.script = script
        self.sent: list[tuple[int, PieceRequest]] = []

    async def run_piece(self, replica: int, piece: PieceRequest) -> PieceOutput:
        self.sent.append((replica, piece))
        out = self.script.pop(0)
        if isinstance(out, ReplicaDownError):
            raise out
        return out


async def test_a_steps_pieces_carry_the_chain_and_each_has_its_own_id() -> None:
    lost = ReplicaDownError("cut")
    lost.partial = PieceOutput((7,), "abort")
    runner = Scripted([PieceOutput((5, 6), "length"), ReplicaDownError("refused"), lost,
                       PieceOutput((8, 9), "length"), PieceOutput((1,), "stop")])
    cfg = ExecutorConfig(backend=Backend.SGLANG, model="m", continuation=True, piece_tokens=2,
                         sampling=SamplingParams(max_tokens=16, extra={"min_tokens": 5}))
    prompt = PromptInput("p", token_ids=(1, 2, 3))
    relocations: list[int] = []

    def relocate(samples: object, replica: int, url: str, exc: BaseException) -> int:
        relocations.append(replica)
        return 1 - replica

    att = ChainedAttempt(runner, [0], cfg, prompt, [ResponseChain(16, prompt.token_ids)],
                         lambda pid, i: 6, AttemptProgress(), relocate,
                         priority_bucket_tokens=2)
    (resp,) = await att.run()

    assert resp.token_ids == (5, 6, 7, 8, 9, 1) and resp.finish_reason == "stop"
    assert relocations == [0, 1]  # both faults relocated, the partial kept
    ids = [p.request_id for _, p in runner.sent]
    assert len(set(ids)) == len(ids) == 5
    assert [r for r, _ in runner.sent] == [0, 0, 1, 0, 0]
    assert [p.prompt_ids for _, p in runner.sent] == [
        (1, 2, 3), (1, 2, 3, 5, 6), (1, 2, 3, 5, 6), (1, 2, 3, 5, 6, 7),
        (1, 2, 3, 5, 6, 7, 8, 9)]
    assert [p.max_tokens for _, p in runner.sent] == [2, 2, 2, 2, 1]  # the forced 6 tokens
    assert [p.sampling.extra["min_tokens"] for _, p in runner.sent] == [2, 2, 2, 2, 0]
    assert [p.priority for _, p in runner.sent] == [0, -1, -1, -1, -2]
    assert all(p.forced for _, p in runner.sent)
    assert att.num_moved_pieces == 0  # relocations are not moves


async def test_without_continuation_a_fault_restarts_the_response_from_its_prompt() -> None:
    """One piece per response: no seams (a penalty is fine, no logprobs added for the stop
    string), a fault's partial is dropped, the response starts again from its prompt where
    ``relocate`` names, and the lost piece counts (none for a refused request)."""
    lost = ReplicaDownError("cut")
    lost.partial = PieceOutput((7,), "abort")
    runner = Scripted([ReplicaDownError("refused"), lost, PieceOutput((4, 5), "stop")])
    sampling = SamplingParams(max_tokens=16, stop=["x"], extra={"repetition_penalty": 1.2})
    cfg = ExecutorConfig(backend=Backend.SGLANG, model="m", sampling=sampling)
    prompt = PromptInput("p", token_ids=(1, 2, 3))
    told: list[tuple[int, ...]] = []

    def relocate(samples: object, replica: int, url: str, exc: BaseException) -> int:
        told.append(tuple(samples))  # type: ignore[call-overload]
        return 1 - replica

    progress = AttemptProgress()
    att = ChainedAttempt(runner, [0], cfg, prompt, [ResponseChain(16, prompt.token_ids)],
                         None, progress, relocate)
    (resp,) = await att.run()

    assert resp.token_ids == (4, 5) and resp.finish_reason == "stop"
    assert told == [(0,), (0,)] and [r for r, _ in runner.sent] == [0, 1, 0]
    assert all(p.prompt_ids == (1, 2, 3) and p.max_tokens == 16 for _, p in runner.sent)
    assert all(p.sampling.logprobs is None for _, p in runner.sent)
    assert [(x.sample, x.exact, x.estimate) for x in progress.lost] == [(0, 0, True)]
    assert progress.num_finished == 1 and progress.finished_tokens == 2
