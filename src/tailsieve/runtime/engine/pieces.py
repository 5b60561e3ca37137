"""The one-method seam between the session gateway and a server: run one piece of a turn.

A turn is generated as a chain of pieces (``runtime.execution.chain``): piece ``k + 1`` is sent with the
turn's prompt plus every token the earlier pieces generated, and the remaining token budget.
A ``PieceRunner`` sends one such piece to one replica and returns what it generated; the
gateway decides where each piece goes and joins them. ``HttpPieceRunner`` speaks vLLM's
``/v1/completions`` (token-id prompts) and SGLang's ``/generate`` (``input_ids``); the verl
router adds a runner over Ray handles; tests use ``runtime.stub.StubPieceRunner``.

A piece may carry a ``sink`` (a streamed answer's): a runner that streams (``PieceStreamer``)
hands it each chunk's tokens as they come (``TokenDelta``), and still returns the whole piece.

Errors a runner raises (``tailsieve.runtime.engine.transport``): ``ReplicaDownError`` when the
replica is gone (the gateway takes it out and continues the turn elsewhere from the last
seam), ``RequestError`` when it answered badly and retries did not help (the turn fails with
it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, runtime_checkable

from tailsieve.errors import ConfigError
from tailsieve.runtime.engine.backends import SamplingParams
from tailsieve.runtime.execution.chain import Piece

FINISH_REASONS = ("stop", "length", "abort")
ENDED_REASONS = ("tool_calls", "function_call", "content_filter")  # a chat server ended the
# response by its own choice: a finished response, as "stop"
CHARS_PER_TOKEN = 4  # a text prompt's characters per token until its server's count is known


def text_tokens(text: str, chars_per_token: float = CHARS_PER_TOKEN) -> int:
    """A text prompt's tokens, estimated from its characters until its server counts them."""
    return max(1, round(len(text) / chars_per_token))


def piece_reason(reason: str | None) -> str:
    """A server's finish reason as a piece's: one of ``FINISH_REASONS``; a chat server's own end
    (``ENDED_REASONS``) is "stop"; any other (vLLM's or SGLang's abort, none) is "abort"."""
    if reason in FINISH_REASONS:
        return str(reason)
    return "stop" if reason in ENDED_REASONS else "abort"


_SAMPLING_FIELDS = tuple(f.name for f in fields(SamplingParams) if f.name != "extra")


@dataclass(frozen=True, slots=True)
class TokenDelta:
    """The tokens one chunk of a running piece brought."""

    token_ids: tuple[int, ...]
    text: str
    logprobs: tuple[float, ...] | None = None  # of each token, when asked
    text_offsets: tuple[int, ...] | None = None  # start of each token's text in ``text``
    sample: int = 0  # the request's response they belong to (``PieceRequest.num_samples``)
    token_texts: tuple[str, ...] | None = None  # each token's text, as the server gave it
    top_logprobs: tuple[Any, ...] | None = None  # each token's alternatives, as the server
    # gave them


TokenSink = Callable[[TokenDelta], None]


@dataclass(frozen=True, slots=True)
class PieceRequest:
    """One piece to generate."""

    prompt_ids: tuple[int, ...]  # the turn's prompt plus the tokens earlier pieces generated
    # (empty only for a first piece sent as ``prompt_text``)
    sampling: SamplingParams  # the turn's sampling (its ``max_tokens`` is the turn's cap)
    max_tokens: int  # the most tokens this piece may generate
    request_id: str  # unique per piece (SGLang's ``rid``; logs)
    sink: TokenSink | None = field(default=None, compare=False, repr=False)  # told of the
    # piece's tokens as they come, where the runner streams (``PieceStreamer``); else unused
    engine_args: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    # the turn's caller's keywords for the engine, passed with each piece (verl's ``generate``)
    priority: int | None = None  # vLLM's request priority (lower first; the server needs
    # ``--scheduling-policy priority``); None: not sent
    prompt_text: str | None = None  # a first piece whose prompt is text: the server
    # tokenizes it and echoes its ids (``PieceOutput.prompt_ids``)
    forced: bool = False  # replay: generate exactly ``max_tokens`` (EOS ignored)
    messages: tuple[dict[str, str], ...] | None = None  # a chat prompt (backend vllm-chat)
    num_samples: int = 1  # responses of the one request (``HttpPieceRunner.run_samples``)

    def __post_init__(self) -> None:
        if not self.prompt_ids and not self.prompt_text and not self.messages:
            raise ConfigError(f"piece {self.request_id!r}: empty prompt")
        if self.max_tokens < 1:
            raise ConfigError(f"piece {self.request_id!r}: max_tokens must be >= 1, "
                              f"got {self.max_tokens}")
        if self.num_samples < 1:
            raise ConfigError(f"piece {self.request_id!r}: num_samples must be >= 1")

    def sampling_dict(self) -> dict[str, Any]:
        """This piece's sampling as vLLM's sampling-parameter dict (``max_tokens`` = the
        piece's cap; unset fields left out): what an engine-level runner passes on."""
        return {**sampling_dict(self.sampling), "max_tokens": self.max_tokens}


@dataclass(frozen=True, slots=True)
class PieceOutput:
    """What one piece generated."""

    token_ids: tuple[int, ...]
    finish_reason: str  # "stop" | "length" (the piece's cap, or the model's length) | "abort"
    text: str | None = None  # None: the runner returns no text (token ids only)
    logprobs: tuple[float, ...] | None = None  # of each generated token, when asked
    text_offsets: tuple[int, ...] | None = None  # start of each token's text in ``text``
    num_cached_tokens: int | None = None  # prompt tokens the server found cached (None: not
    # reported)
    num_prompt_tokens: int | None = None  # prompt tokens as the server counted them (None:
    # not reported)
    token_texts: tuple[str, ...] | None = None  # each token's text, as the server gave it
    # (vLLM ``logprobs.tokens``; None: not given)
    top_logprobs: tuple[Any, ...] | None = field(default=None, compare=False, repr=False)
    # each token's alternatives, as the server gave them (vLLM ``logprobs.top_logprobs``)
    stop_reason: int | str | None = None  # the stop string or token id that ended it (None:
    # EOS, length, not said)
    detail: Any = field(default=None, compare=False, repr=False)  # an engine client's own
    # account of the piece for its front door (verl's ``TokenOutput``); rides the chain to
    # ``TurnResult.chain``
    prompt_ids: tuple[int, ...] | None = field(default=None, compare=False, repr=False)  # the
    # prompt's ids as the server echoed them (a ``prompt_text`` piece's; None: not echoed)
    num_tokens: int | None = None  # generated tokens as the server counted them where it did
    # not return their ids (``token_ids`` empty); None: ``len(token_ids)``
    chunk_times_s: tuple[float, ...] | None = None  # streamed: each chunk's arrival, seconds
    # after the request was sent (its last try)
    chunk_tokens: tuple[int, ...] | None = None  # streamed: tokens generated after each chunk

    def __post_init__(self) -> None:
        if self.finish_reason not in FINISH_REASONS:
            raise ConfigError(f"finish_reason must be one of {FINISH_REASONS}, "
                              f"got {self.finish_reason!r}")
        if self.logprobs is not None and len(self.logprobs) != len(self.token_ids):
            raise ConfigError(f"{len(self.logprobs)} logprobs for {len(self.token_ids)} tokens")

    def piece(self, replica: int, texts: bool = True) -> Piece:
        """This output as a piece of its response's chain, generated on ``replica``; one the
        server aborted is "moved" (the response goes on from its last token). ``texts``:
        keep each token's text and top logprobs (what an answer's per-token view reads)."""
        reason = "moved" if self.finish_reason == "abort" else self.finish_reason
        return Piece(self.token_ids, self.text or "", reason, self.logprobs, self.text_offsets,
                     replica, token_texts=self.token_texts if texts else None,
                     top_logprobs=self.top_logprobs if texts else None,
                     stop_reason=self.stop_reason, detail=self.detail)

    @property
    def num_generated(self) -> int:
        """Tokens the piece generated (their ids returned or not)."""
        return len(self.token_ids) if self.num_tokens is None else self.num_tokens


@runtime_checkable
class PieceRunner(Protocol):
    """How one piece is sent to one replica."""

    async def run_piece(self, replica: int, piece: PieceRequest) -> PieceOutput:
        """Generate ``piece`` on ``replica``. Raises ``ReplicaDownError`` when the replica is
        gone, ``RequestError`` when it answered badly. Cancelling the call aborts the piece
        on the server."""
        ...


@runtime_checkable
class PieceInterrupter(Protocol):
    """A runner that can end a running piece at once (optional). ``HttpPieceRunner`` can on
    SGLang (``/abort_request``: the piece returns its partial output) and on vLLM with
    streamed pieces (the stream is closed: the piece returns the tokens streamed so far); a
    mid-turn move then takes effect at once instead of at the running piece's end."""

    @property
    def interrupts(self) -> bool:
        """Whether ``interrupt`` ends pieces under this runner's configuration."""
        ...

    def interrupt(self, replica: int, request_id: str) -> None:
        """Ask the piece ``request_id`` running on ``replica`` to end now: its ``run_piece``
        returns what it generated so far with finish reason "abort" (possibly no token, or
        its whole output when it ended first). Never raises; a piece not running is
        ignored."""
        ...

    def generated_tokens(self, request_id: str) -> int | None:
        """Tokens the running piece ``request_id`` has returned so far (streamed), or None
        when the runner does not see them before the piece ends."""
        ...


@runtime_checkable
class PieceStreamer(Protocol):
    """A runner that streams a piece carrying a ``sink`` (optional): each chunk's tokens go
    to the sink as they come, and ``interrupt`` ends such a piece at once, keeping what it
    streamed (whatever ``PieceInterrupter.interrupts`` says of unstreamed pieces)."""

    @property
    def streams_sinks(self) -> bool:
        """Whether pieces with a sink are streamed."""
        ...

    def interrupt(self, replica: int, request_id: str) -> None:
        """End the running piece ``request_id`` now (as ``PieceInterrupter.interrupt``)."""
        ...


@runtime_checkable
class HealthProbe(Protocol):
    """A runner that can tell whether a replica taken out answers again (optional)."""

    async def probe(self, replica: int) -> bool:
        """Whether ``replica`` is healthy now."""
        ...


def sampling_from_dict(params: Mapping[str, Any]) -> SamplingParams:
    """``SamplingParams`` from vLLM-style sampling fields (``max_tokens``, ``temperature``,
    ``top_p``, ``top_k``, ``stop``, ``seed``, ``logprobs``, ...); the others go to ``extra``
    and are sent verbatim. ``max_new_tokens`` (SGLang) is read as ``max_tokens``."""
    known: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, val in params.items():
        if key == "max_new_tokens":
            key = "max_tokens"
        if key in _SAMPLING_FIELDS:
            known[key] = val
        elif val is not None:
            extra[key] = val
    stop = known.get("stop")
    if isinstance(stop, str):
        known["stop"] = (stop,)
    elif stop is not None:
        known["stop"] = tuple(stop) or None
    if known.get("max_tokens") is None:
        known.pop("max_tokens", None)
    return SamplingParams(**known, extra=extra)


def sampling_dict(sampling: SamplingParams) -> dict[str, Any]:
    """The inverse of ``sampling_from_dict``: set fields and ``extra``."""
    out: dict[str, Any] = {k: getattr(sampling, k) for k in _SAMPLING_FIELDS
                           if getattr(sampling, k) is not None}
    if "stop" in out:
        out["stop"] = list(out["stop"])
    out.update(sampling.extra)
    return out
