"""``SampleTrace.output``: the per-token detail of a sample is read off its chain's pieces."""

from __future__ import annotations

from tailsieve.runtime.execution.chain import Piece
from tailsieve.runtime.execution.result import PieceSpan, TurnResult
from tailsieve.runtime.proxy.sample import SampleTrace


def _result(chain: tuple[Piece, ...]) -> TurnResult:
    ids = tuple(t for p in chain for t in p.token_ids)
    return TurnResult(ids, "".join(p.text for p in chain), tuple(-0.5 for _ in ids), "length",
                      tuple(PieceSpan(0, 0, len(p.token_ids)) for p in chain), 0, False,
                      "first", 0, chain=chain)


def test_strings_from_the_server_else_cut_at_offsets_and_tops_only_where_all_have_them(
        ) -> None:
    with_strs = Piece((1, 2), "ab", "moved", (-0.5, -0.5), (0, 1),
                      token_texts=("a", "b"), top_logprobs=({"a": -0.5}, {"b": -0.5}))
    empty = Piece((), "", "moved", (), ())  # moved away at once: no tokens, no offsets
    cut = Piece((3, 4), "cde", "length", (-0.5, -0.5), (0, 1))  # no strings from its server
    out = SampleTrace((9,)).output(0, _result((with_strs, empty, cut)), (), True, 0.0)
    assert out.token_strs == ("a", "b", "c", "de")
    assert out.tops is None  # the last piece's server gave no alternatives
    both = SampleTrace((9,)).output(0, _result((with_strs, empty)), (), True, 0.0)
    assert both.tops == ({"a": -0.5}, {"b": -0.5})
    bare = Piece((5,), "x", "length")  # neither strings nor offsets
    assert SampleTrace((9,)).output(0, _result((with_strs, bare)), (), True,
                                    0.0).token_strs is None
    assert SampleTrace((9,)).output(0, _result((cut,)), (), False, 0.0).token_strs is None
