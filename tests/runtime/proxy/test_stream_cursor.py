"""``StreamCursor``: whatever the pieces, the chunks they stream in and the stop strings, a
streamed sample's chunks join into exactly its final output (the chain's join, cut at a stop
string across a seam)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.runtime.engine.pieces import PieceOutput, TokenDelta
from tailsieve.runtime.execution.chain import Piece, ResponseChain
from tailsieve.runtime.execution.result import PieceSpan, TurnResult
from tailsieve.runtime.proxy.sample import LiveTokens, SampleTrace
from tailsieve.runtime.proxy.stream import StreamCursor

WORDS = ["a", "b", "ab", "ba", "c", "abc", " "]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=30),
       st.lists(st.integers(1, 6), min_size=1, max_size=30),
       st.lists(st.text(alphabet="abc ", min_size=1, max_size=4), max_size=2),
       st.integers(1, 4))
def test_the_chunks_join_into_the_final_output(words: list[str], cuts: list[int],
                                               stop: list[str], chunk: int) -> None:
    ids = list(range(len(words)))
    chain = ResponseChain(max_tokens=len(ids), prompt_ids=(1,), stop=tuple(stop))
    trace = SampleTrace((1,))
    live = LiveTokens()
    cursor = StreamCursor(tuple(stop), want_logprobs=True)
    sent_ids: list[int] = []
    sent_text = ""
    k, start = 0, 0
    while not chain.done:
        n = min(cuts[k % len(cuts)], len(ids) - start)
        k += 1
        toks = ids[start:start + n]
        texts = [words[t] for t in toks]
        offs = [sum(len(x) for x in texts[:j]) for j in range(n)]
        lps = tuple(-0.1 * t for t in toks)
        out = PieceOutput(tuple(toks), "length", "".join(texts), lps, tuple(offs))
        chain.add(Piece(tuple(toks), "".join(texts), "length", lps, tuple(offs)), n)
        for a in range(0, n, chunk):  # the piece streams in chunks of ``chunk`` tokens
            b = min(a + chunk, n)
            rel = tuple(o - offs[a] for o in offs[a:b])
            assert live.grow(start + a, TokenDelta(tuple(toks[a:b]), "".join(texts[a:b]),
                                                   lps[a:b], rel))
            d = cursor.progress(live)
            if d is not None:
                assert d.start == len(sent_ids) and d.char_start == len(sent_text)
                assert d.token_strs == tuple(words[t] for t in d.token_ids)
                sent_ids += d.token_ids
                sent_text += d.text
        trace.add(PieceSpan(0, start, start + n), out)
        start += n
    final = chain.final
    assert final is not None and final.token_ids is not None
    result = TurnResult(tuple(final.token_ids), final.text, final.logprobs,
                        final.finish_reason, (), 0, False, "first", 0,
                        chain=tuple(chain.pieces))
    out = trace.output(0, result, tuple(stop), True, 0.0)
    d = cursor.finish(out)
    sent_ids += d.token_ids
    sent_text += d.text
    assert sent_ids == list(final.token_ids) and sent_text == final.text
    assert out.token_strs is not None and "".join(out.token_strs).startswith(final.text)
