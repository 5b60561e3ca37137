"""``StubPieceRunner``: in-memory replicas with a deterministic "model", for tests and dry runs.

The next token depends only on the tokens before it (a rolling hash of the whole prefix), as a
greedy model's would, so a turn generated in pieces, on any replicas, must equal the turn
generated in one go: tests check token-exact chains against ``StubModel.generate``. A token
``t`` with ``t % eos_every == 0`` ends the response ("stop"). Each replica keeps a prefix cache
(``emulator.prefix_cache``) and reports the cached prompt tokens of every piece. Time: a piece
of ``k`` tokens sleeps ``k * seconds_per_token * (1 + batch_slowdown * (running - 1))`` on its
replica. Faults: ``kill(replica)`` fails its running pieces and refuses new ones
(``ReplicaDownError``) until ``revive``. With ``interrupts=True`` it is a ``PieceInterrupter``:
``interrupt`` ends a running piece at once with the tokens its time so far generated (finish
"abort"), as SGLang's ``/abort_request`` does. Every piece is logged (``calls``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from tailsieve.errors import ConfigError
from tailsieve.runtime.emulator.prefix_cache import PrefixCache
from tailsieve.runtime.sessions.pieces import PieceOutput, PieceRequest
from tailsieve.runtime.transport import ReplicaDownError

_MOD = (1 << 61) - 1
_MUL = 1_000_003
VOCAB_BASE = 1_000  # generated ids are VOCAB_BASE .. VOCAB_BASE + VOCAB - 1
VOCAB = 50_000


@dataclass(frozen=True, slots=True)
class StubModel:
    """The deterministic next-token rule."""

    eos_every: int = 97  # a generated id divisible by this ends the response (mean length)

    def __post_init__(self) -> None:
        if self.eos_every < 2:
            raise ConfigError(f"eos_every must be >= 2, got {self.eos_every}")

    @staticmethod
    def state(ids: Sequence[int]) -> int:
        h = 0
        for t in ids:
            h = (h * _MUL + t) % _MOD
        return h

    def generate(self, prompt_ids: Sequence[int], max_tokens: int) -> tuple[list[int], str]:
        """The tokens generated after ``prompt_ids`` (at most ``max_tokens``) and the finish
        reason, as one request would produce them."""
        h = self.state(prompt_ids)
        out: list[int] = []
        while len(out) < max_tokens:
            tok = VOCAB_BASE + (h >> 11) % VOCAB
            out.append(tok)
            h = (h * _MUL + tok) % _MOD
            if tok % self.eos_every == 0:
                return out, "stop"
        return out, "length"


@dataclass(frozen=True, slots=True)
class StubCall:
    """One piece as a replica received it."""

    replica: int
    request_id: str
    prompt_ids: tuple[int, ...]
    max_tokens: int
    output_ids: tuple[int, ...] = ()  # what it returned (empty when it failed)
    failed: bool = False


@dataclass(slots=True)
class _Replica:
    cache: PrefixCache = field(default_factory=PrefixCache)
    running: set[asyncio.Future[None]] = field(default_factory=set)
    dead: bool = False


@dataclass(slots=True)
class _Piece:
    gate: asyncio.Future[None]
    started_s: float
    s_per_token: float
    num_tokens: int
    stopped_at: int | None = None  # tokens it had generated when interrupted


class StubPieceRunner:
    """``num_replicas`` in-memory replicas (see the module docstring)."""

    def __init__(
        self,
        num_replicas: int,
        model: StubModel | None = None,
        seconds_per_token: float | Sequence[float] = 0.0,
        batch_slowdown: float = 0.0,
        logprobs: bool = True,
        interrupts: bool = False,
    ) -> None:
        if num_replicas < 1:
            raise ConfigError(f"num_replicas must be >= 1, got {num_replicas}")
        spt = ([float(seconds_per_token)] * num_replicas
               if isinstance(seconds_per_token, int | float) else list(seconds_per_token))
        if len(spt) != num_replicas or min(spt) < 0 or batch_slowdown < 0:
            raise ConfigError("seconds_per_token: one value >= 0 (or one per replica); "
                              "batch_slowdown >= 0")
        self.model = model or StubModel()
        self.seconds_per_token = spt
        self.batch_slowdown = batch_slowdown
        self.logprobs = logprobs
        self.replicas = [_Replica() for _ in range(num_replicas)]
        self.calls: list[StubCall] = []
        self.interrupts = interrupts
        self.num_interrupts = 0  # pieces ended early by ``interrupt``
        self._live: dict[str, _Piece] = {}

    def interrupt(self, replica: int, request_id: str) -> None:
        """End the running piece now with the tokens generated so far (``interrupts``)."""
        live = self._live.get(request_id)
        if not self.interrupts or live is None or live.gate.done():
            return
        ran = asyncio.get_running_loop().time() - live.started_s
        done = int(ran / live.s_per_token) if live.s_per_token > 0 else live.num_tokens
        live.stopped_at = min(done, live.num_tokens)
        self.num_interrupts += 1
        live.gate.set_result(None)

    def generated_tokens(self, request_id: str) -> int | None:
        return None

    def kill(self, replica: int) -> None:
        """The replica dies: its running pieces fail, new ones are refused."""
        rep = self.replicas[replica]
        rep.dead = True
        rep.cache = PrefixCache()
        for fut in list(rep.running):
            if not fut.done():
                fut.set_exception(ReplicaDownError(f"stub replica {replica} died"))

    def revive(self, replica: int) -> None:
        self.replicas[replica].dead = False

    def num_running(self, replica: int) -> int:
        return len(self.replicas[replica].running)

    async def probe(self, replica: int) -> bool:
        return not self.replicas[replica].dead

    async def run_piece(self, replica: int, piece: PieceRequest) -> PieceOutput:
        """A text prompt (``prompt_text``) is read as its characters' code points and echoed
        (``PieceOutput.prompt_ids``), as a server's own tokenizer would."""
        rep = self.replicas[replica]
        prompt = piece.prompt_ids or tuple(ord(c) for c in piece.prompt_text or "")
        piece = replace(piece, prompt_ids=prompt)
        echo = prompt if piece.prompt_text is not None else None
        if rep.dead:
            self.calls.append(StubCall(replica, piece.request_id, piece.prompt_ids,
                                       piece.max_tokens, failed=True))
            raise ReplicaDownError(f"stub replica {replica}: connection refused")
        cached = rep.cache.lookup(piece.prompt_ids)
        ids, reason = self.model.generate(piece.prompt_ids, piece.max_tokens)
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        rep.running.add(gate)
        loop = asyncio.get_running_loop()
        try:
            slow = 1.0 + self.batch_slowdown * (len(rep.running) - 1)
            per = self.seconds_per_token[replica] * slow
            live = self._live[piece.request_id] = _Piece(gate, loop.time(), per, len(ids))
            timer = loop.call_later(len(ids) * per, _release, gate)
            try:
                await gate
            finally:
                timer.cancel()
        except ReplicaDownError:
            self.calls.append(StubCall(replica, piece.request_id, piece.prompt_ids,
                                       piece.max_tokens, failed=True))
            raise
        finally:
            rep.running.discard(gate)
            self._live.pop(piece.request_id, None)
        if live.stopped_at is not None and live.stopped_at < len(ids):
            ids, reason = ids[:live.stopped_at], "abort"
        rep.cache.insert(tuple(piece.prompt_ids) + tuple(ids))
        self.calls.append(StubCall(replica, piece.request_id, piece.prompt_ids,
                                   piece.max_tokens, tuple(ids)))
        lps = tuple(-((t % 7) + 1) / 10 for t in ids) if self.logprobs else None
        return PieceOutput(tuple(ids), reason, text="".join(f"<{t}>" for t in ids),
                           logprobs=lps, text_offsets=_offsets(ids), num_cached_tokens=cached,
                           prompt_ids=echo)

    async def aclose(self) -> None:
        return None


def _release(gate: asyncio.Future[None]) -> None:
    if not gate.done():
        gate.set_result(None)


def _offsets(ids: Sequence[int]) -> tuple[int, ...]:
    out, pos = [], 0
    for t in ids:
        out.append(pos)
        pos += len(f"<{t}>")
    return tuple(out)
