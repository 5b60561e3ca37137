"""A streamed piece: its tokens reach its sink as they come, on vLLM's chunks and SGLang's
cumulative outputs, and an interrupted piece ends only where its text is whole (never inside a
multi-byte character, whose text the servers send with its last token)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from tailsieve.runtime.engine.backends import SamplingParams
from tailsieve.runtime.engine.pieces import TokenDelta
from tailsieve.runtime.engine.streamed import StreamedPiece
from tailsieve.runtime.engine.transport import JSON
from tailsieve.runtime.sessions import HttpPieceRunner, PieceRequest

# "a", then the three byte tokens of 好 (the server sends its text with the last), then "b"
TOKENS = [(1, "a"), (2, ""), (3, ""), (4, "好"), (5, "b"), (6, "c")]


def vllm_chunk(tok: int, text: str, reason: str | None = None) -> JSON:
    return {"choices": [{"index": 0, "text": text, "token_ids": [tok],
                         "finish_reason": reason}]}


class ScriptedStream:
    """A transport whose one stream sends ``TOKENS`` one chunk at a time, each when the
    test releases it."""

    def __init__(self) -> None:
        self.release = asyncio.Queue[None]()
        self.sent = 0

    async def _chunks(self) -> AsyncIterator[JSON]:
        for k, (tok, text) in enumerate(TOKENS):
            await self.release.get()
            self.sent += 1
            yield vllm_chunk(tok, text, "length" if k == len(TOKENS) - 1 else None)

    def stream_json(self, url: str, payload: JSON, timeout_s: float | None,
                    ) -> AsyncIterator[JSON]:
        return self._chunks()

    async def post_json(self, url: str, payload: JSON, timeout_s: float | None) -> Any:
        raise AssertionError("not streamed")

    async def get(self, url: str, timeout_s: float | None) -> tuple[int, str]:
        return 200, ""

    async def aclose(self) -> None:
        return None


async def test_an_interrupt_inside_a_character_waits_for_its_last_token() -> None:
    t = ScriptedStream()
    runner = HttpPieceRunner(["http://r0"], model="m", transport=t)
    seen: list[TokenDelta] = []
    piece = PieceRequest((7, 8), SamplingParams(max_tokens=6), 6, "p-0", sink=seen.append)
    task = asyncio.create_task(runner.run_piece(0, piece))
    for _ in range(2):  # "a" and the first byte of 好
        t.release.put_nowait(None)
    while t.sent < 2 or len(seen) < 2:
        await asyncio.sleep(0)
    runner.interrupt(0, "p-0")  # inside 好: the piece goes on to its last byte
    for _ in range(4):
        t.release.put_nowait(None)
    out = await task
    assert out.token_ids == (1, 2, 3, 4) and out.text == "a好" and out.finish_reason == "abort"
    assert [d.token_ids for d in seen] == [(1,), (2,), (3,), (4,)]


async def test_an_interrupt_at_a_whole_character_ends_at_once() -> None:
    t = ScriptedStream()
    runner = HttpPieceRunner(["http://r0"], model="m", transport=t)
    piece = PieceRequest((7, 8), SamplingParams(max_tokens=6), 6, "p-0",
                         sink=lambda d: None)
    task = asyncio.create_task(runner.run_piece(0, piece))
    t.release.put_nowait(None)
    while t.sent < 1:
        await asyncio.sleep(0)
    await asyncio.sleep(0)
    runner.interrupt(0, "p-0")
    out = await task
    assert out.token_ids == (1,) and out.text == "a"


def test_sglang_cumulative_and_incremental_outputs_give_each_token_once() -> None:
    got: list[TokenDelta] = []
    cum = StreamedPiece(sink=got.append, sglang=True)
    for ids, text, fin in (([5], "x", None), ([5, 6, 7], "xyz", None),
                           ([5, 6, 7, 8], "xyzw", {"type": "length", "length": 4})):
        cum.add({"text": text, "output_ids": ids,
                 "meta_info": {"completion_tokens": len(ids), "finish_reason": fin}}, "t")
    assert [d.token_ids for d in got] == [(5,), (6, 7), (8,)]
    assert "".join(d.text for d in got) == "xyzw" and cum.output().finish_reason == "length"
    inc = StreamedPiece(sglang=True)  # --incremental-streaming-output: each chunk its own
    for ids, text, total in (([5], "x", 1), ([6, 7], "yz", 3)):
        inc.add({"text": text, "output_ids": ids, "meta_info": {"completion_tokens": total}},
                "t")
    assert inc.ids == [5, 6, 7] and "".join(inc.texts) == "xyz"


def test_each_chunks_token_texts_and_alternatives_are_gathered_with_the_stop_reason() -> None:
    got: list[TokenDelta] = []
    piece = StreamedPiece(sink=got.append)
    for tok, text in ((1, "a"), (2, "b")):
        piece.add({"choices": [{"index": 0, "text": text, "token_ids": [tok], "logprobs": {
            "tokens": [text], "token_logprobs": [-0.1], "top_logprobs": [{text: -0.1}]}}]}, "w")
    piece.add({"choices": [{"index": 0, "text": "", "token_ids": [], "finish_reason": "stop",
                            "stop_reason": 7}]}, "w")
    assert [(d.token_texts, d.top_logprobs) for d in got] == [
        (("a",), ({"a": -0.1},)), (("b",), ({"b": -0.1},))]
    out = piece.output()
    assert out.token_texts == ("a", "b") and out.top_logprobs == ({"a": -0.1}, {"b": -0.1})
    assert out.stop_reason == 7 and out.piece(0).stop_reason == 7
    plain = StreamedPiece()  # a chunk with tokens but without their texts: none for the piece
    plain.add({"choices": [{"index": 0, "text": "a", "token_ids": [1], "logprobs": {
        "tokens": ["a"], "token_logprobs": [-0.1]}}]}, "w")
    plain.add(vllm_chunk(2, "b", "length"), "w")
    assert plain.output().token_texts is None and plain.output().stop_reason is None
    sg = StreamedPiece(sglang=True)
    sg.add({"text": "x", "output_ids": [5], "meta_info": {
        "completion_tokens": 1, "finish_reason": {"type": "stop", "matched": "END"}}}, "w")
    assert sg.output().stop_reason == "END"
