"""A response as a chain of pieces: continuation, joining, and history-dependent sampling.

A response may be generated as several requests ("pieces"). Piece ``k + 1`` is sent with the
prompt's token ids plus every token the earlier pieces generated as its prompt, and with the
remaining ``max_tokens``. The next token depends only on that prefix under the same weights, so
the continuation samples from the same distribution (vLLM recomputes a preempted request the
same way). ``ResponseChain.join`` delivers the chain in the form of a response generated in one
go: token ids, text and logprobs concatenated, the last piece's finish reason.

What depends on generation history is handled here, once:

- stop strings: the server checks only the text of its own piece, so a stop string that spans a
  seam is found in the joined text and the response is cut where the server would have cut it
  (text before the stop string, token ids up to the token that completed it);
- ``min_tokens``: each piece asks for the floor minus the tokens already generated;
- presence / frequency / repetition penalties: a continued piece would count only its own
  tokens as history, so a chain refuses them (``ChainError``, one line) — a response with a
  penalty runs as one uninterrupted piece, with no moves;
- per-request seeds: a continued piece restarts the seeded generator, so seeded determinism is
  not kept across a seam (``SEED_WARNING``); the tokens are still sampled under the policy.

Pure: no I/O.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any

from tailsieve.errors import ConfigError
from tailsieve.runtime.engine.backends import (
    EncodedIds,
    PromptInput,
    Response,
    SamplingParams,
    encode_ids,
)

PENALTY_KEYS = ("presence_penalty", "frequency_penalty", "repetition_penalty")
SEED_WARNING = (
    "per-request seeds are not kept across a seam: a continued piece restarts the seeded "
    "generator, so a chained response is not reproducible from its seed"
)


class ChainError(ConfigError):
    """A response cannot be continued (history-dependent sampling option, no token ids)."""


def penalties_of(sampling: SamplingParams) -> list[str]:
    """Names of history-dependent penalties set to a non-neutral value."""
    out: list[str] = []
    for key in PENALTY_KEYS:
        val = getattr(sampling, key, None) if key == "presence_penalty" else None
        if val is None:
            val = sampling.extra.get(key)
        neutral = 1.0 if key == "repetition_penalty" else 0.0
        if val is not None and float(val) != neutral:
            out.append(f"{key}={val}")
    return out


def check_continuable(sampling: SamplingParams) -> None:
    """Raise ``ChainError`` (one line) when responses under ``sampling`` cannot be continued."""
    bad = penalties_of(sampling)
    if bad:
        raise ChainError(
            f"cannot continue a response sampled with {', '.join(bad)}: the penalty depends on "
            "the tokens generated so far, which a continued piece would not count; drop the "
            "penalty or turn continuation off"
        )


@dataclass(frozen=True, slots=True)
class Piece:
    """One request's part of a response."""

    token_ids: tuple[int, ...]
    text: str
    finish_reason: str  # "stop" | "length" (piece cap or response cap) | "moved" | ...
    logprobs: tuple[float, ...] | None = None
    text_offsets: tuple[int, ...] | None = None  # start of each token's text in ``text``
    replica: int = -1  # executor replica that generated it (-1 = unknown)
    ids_json: str | None = field(default=None, repr=False, compare=False)  # the ids as JSON
    token_texts: tuple[str, ...] | None = None  # each token's text, as the server gave it
    top_logprobs: tuple[Any, ...] | None = field(default=None, repr=False, compare=False)
    # each token's alternatives, as the server gave them
    stop_reason: int | str | None = None  # the stop string or token id that ended it
    detail: Any = field(default=None, repr=False, compare=False)  # an engine client's own
    # account of the piece (``PieceOutput.detail``: verl's ``TokenOutput``)

    def __post_init__(self) -> None:
        ids = self.token_ids
        if isinstance(ids, EncodedIds):  # keep a plain tuple (the GC untracks it) and the JSON
            object.__setattr__(self, "token_ids", tuple(ids))
            if self.ids_json is None:
                object.__setattr__(self, "ids_json", ids.json)

    def without_json(self) -> Piece:
        """This piece without its ids' JSON (a finished response never sends it back)."""
        return replace(self, ids_json=None)


@dataclass(slots=True)
class ResponseChain:
    """The pieces of one response so far. ``max_tokens``: the response's cap (all pieces)."""

    max_tokens: int
    prompt_ids: tuple[int, ...] | None = None  # known once a server tokenized the prompt
    pieces: list[Piece] = field(default_factory=list)
    stop: tuple[str, ...] = ()
    final: Response | None = None  # set when the chain is complete
    _encoded: list[str] = field(default_factory=list)  # JSON of the prefix, built per piece
    _encoded_pieces: int = 0  # pieces already in ``_encoded``

    @property
    def generated_ids(self) -> tuple[int, ...]:
        pieces = self.pieces
        if len(pieces) == 1:
            return pieces[0].token_ids  # no copy: most responses are one piece
        return tuple(itertools.chain.from_iterable(p.token_ids for p in pieces))  # no per-token loop

    @property
    def num_generated(self) -> int:
        pieces = self.pieces
        if len(pieces) < 2:  # read for every running response at every re-balance check
            return len(pieces[0].token_ids) if pieces else 0
        return sum(len(p.token_ids) for p in pieces)

    @property
    def remaining(self) -> int:
        return self.max_tokens - self.num_generated

    @property
    def done(self) -> bool:
        return self.final is not None

    def next_prompt(self, prompt: PromptInput) -> PromptInput:
        """The prompt of the next piece: the original one, or its token ids plus the tokens
        generated so far."""
        if not self.pieces:
            return prompt
        if self.prompt_ids is None:
            raise ChainError(f"prompt {prompt.prompt_id!r}: its token ids are unknown")
        pieces = tuple(self.pieces)
        return PromptInput(prompt.prompt_id, token_ids=EncodedIds(
            self.prompt_ids + self.generated_ids, lambda ids: self._prefix_json(pieces, ids)))

    def _prefix_json(self, pieces: tuple[Piece, ...], ids: tuple[int, ...]) -> str:
        """The JSON of ``ids``, the prompt and ``pieces`` (the chain's pieces when
        ``next_prompt`` was asked), appended to the JSON of the last piece's prefix."""
        now = self.pieces[:len(pieces)]
        if len(now) < len(pieces) or any(a is not b for a, b in zip(now, pieces, strict=True)):
            return encode_ids(ids)  # the chain changed since: whole
        if not self._encoded or self._encoded_pieces > len(pieces):
            self._encoded = [_inner_json(self.prompt_ids or ())]
            self._encoded_pieces = 0
        for p in pieces[self._encoded_pieces:]:
            if p.token_ids:
                self._encoded.append(
                    p.ids_json[1:-1] if p.ids_json is not None else _inner_json(p.token_ids)
                )
        self._encoded_pieces = len(pieces)
        return "[" + ",".join(x for x in self._encoded if x) + "]"

    def piece_cap(self, piece_tokens: int | None) -> int:
        """``max_tokens`` of the next piece: what is left, at most ``piece_tokens``."""
        left = self.remaining
        return left if piece_tokens is None or left < piece_tokens else piece_tokens

    def piece_sampling(self, sampling: SamplingParams, piece_tokens: int | None) -> SamplingParams:
        """Sampling of the next piece: max_tokens = ``piece_cap``, ``min_tokens`` reduced by
        what was generated. Without ``min_tokens`` a request may instead take the response's
        sampling and the cap (``build_request(max_tokens=...)``), with no new object."""
        cap = self.piece_cap(piece_tokens)
        if "min_tokens" not in sampling.extra:
            return sampling if cap == sampling.max_tokens else replace(sampling, max_tokens=cap)
        extra: dict[str, Any] = dict(sampling.extra)
        extra["min_tokens"] = max(0, min(int(extra["min_tokens"]) - self.num_generated, cap))
        if cap == sampling.max_tokens and extra == sampling.extra:
            return sampling
        return replace(sampling, max_tokens=cap, extra=extra)

    def add(self, piece: Piece, piece_cap: int) -> None:
        """Append a piece generated under a cap of ``piece_cap`` tokens; completes the chain
        when the response ended (stop, its own cap, a stop string across a seam)."""
        self.pieces.append(piece)
        if (
            _seam_stop(self)
            or piece.finish_reason not in ("length", "moved")
            or self.remaining <= 0
            # or the server clipped it (model length): it ends here
            or (piece.finish_reason == "length" and len(piece.token_ids) < piece_cap)
        ):
            if piece.ids_json is not None:  # never sent back now: free its text
                self.pieces[-1] = piece.without_json()
            self.final = self.join()

    def drop_last(self) -> None:
        """Forget the last piece (it is outside the chain)."""
        self.pieces.pop()
        self.final = None
        self._encoded = []

    def join(self) -> Response:
        """The response as if generated in one go (cut at a stop string across a seam)."""
        cut = _seam_stop(self)
        pieces = self.pieces
        text = "".join(p.text for p in pieces)
        ids = self.generated_ids
        if ids.__class__ is not tuple:
            ids = tuple(ids)  # delivered as a plain tuple (not the parser's EncodedIds)
        lps: tuple[float, ...] | None = None
        # a piece that generated nothing (aborted by a move at once) has no logprobs to give
        if any(p.logprobs is not None for p in pieces) and all(
                p.logprobs is not None or not p.token_ids for p in pieces):
            lps = (pieces[0].logprobs if len(pieces) == 1
                   else tuple(itertools.chain.from_iterable(p.logprobs or () for p in pieces)))
        reason = pieces[-1].finish_reason if pieces else "length"
        if cut is not None:
            text, num = cut
            ids, reason = ids[:num], "stop"
            lps = lps[:num] if lps is not None else None
        elif reason == "moved":
            reason = "length"
        return Response(
            text=text, num_tokens=len(ids), finish_reason=reason, token_ids=ids, logprobs=lps
        )


def _inner_json(ids: tuple[int, ...]) -> str:
    """The ids as the inside of a JSON array: the server's own text when the response parser
    kept it (``EncodedIds``), else encoded here."""
    enc = getattr(ids, "json", None)
    return (enc if enc is not None else encode_ids(ids))[1:-1]


def _seam_stop(chain: ResponseChain) -> tuple[str, int] | None:
    """(text, number of tokens) of the response cut at the first stop string that spans a seam,
    or None. The server cut stop strings inside its own piece already."""
    if not chain.stop or len(chain.pieces) < 2:
        return None
    best: tuple[int, int, int] | None = None  # (token index completing it, start, seam piece)
    start = 0
    starts: list[int] = []
    for p in chain.pieces:
        starts.append(start)
        start += len(p.text)
    text = "".join(p.text for p in chain.pieces)
    tok_base = 0
    for k in range(1, len(chain.pieces)):
        tok_base += len(chain.pieces[k - 1].token_ids)
        seam = starts[k]
        for s in chain.stop:
            if not s:
                continue
            lo = max(0, seam - len(s) + 1)
            at = text.find(s, lo, seam + len(s) - 1)
            if at < 0 or at >= seam:
                continue
            j = _completing_token(chain.pieces[k], at + len(s) - seam)
            cand = (tok_base + j, at, k)
            if best is None or cand[:2] < best[:2]:
                best = cand
        if best is not None:
            break  # an earlier seam's stop ends the response before any later one
    if best is None:
        return None
    return text[: best[1]], best[0] + 1


def _completing_token(piece: Piece, end: int) -> int:
    """Index in ``piece`` of the token whose text reaches character ``end`` of the piece."""
    offs = piece.text_offsets
    n = len(piece.token_ids)
    if offs is None or len(offs) != n:
        raise ChainError(
            "a stop string spans a seam but the piece has no per-token text offsets "
            "(vLLM: request logprobs; SGLang is not supported for stop strings with moves)"
        )
    for j in range(n):
        tok_end = offs[j + 1] if j + 1 < n else len(piece.text)
        if tok_end >= end:
            return j
    return n - 1
