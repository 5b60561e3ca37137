"""One set of move settings for every front door (``RolloutConfig`` of the single-turn steps,
``GatewayConfig`` of the session gateway under the proxy and the verl router): whether running
responses move and why not, their piece cap, the balance gate and the stall watch."""

from __future__ import annotations

from dataclasses import dataclass, field

from tailsieve.errors import ConfigError
from tailsieve.runtime.engine.backends import Backend, SamplingParams
from tailsieve.runtime.execution.chain import penalties_of
from tailsieve.runtime.execution.stall_watch import StallSettings

MOVING_POLICY = "tailsieve"  # the one policy that moves running responses (the others place
# them and never move a running one)
PIECE_TOKENS = 512  # default piece cap where moves need pieces (vLLM unstreamed, sessions): the
# best of 128-8,192 in the simulator (qwen3-4b-h100, paper-math, R = 8, 50 ms seams, deferred)
CONTINUABLE_BACKENDS = (Backend.VLLM, Backend.VLLM_CHAT, Backend.SGLANG)  # a response can be
# sent on as token ids (vllm-chat: its prompts are tokenized by the server, LiveExecutor.chat_as_tokens)


def sampling_off_reason(backend: Backend, sampling: SamplingParams) -> str | None:
    """Why responses sampled with ``sampling`` on ``backend`` cannot move (None: they can)."""
    if backend not in CONTINUABLE_BACKENDS:
        return f"backend {backend.value!r} cannot continue a response"
    bad = penalties_of(sampling)
    if bad:
        return (f"{', '.join(bad)} depends on the tokens generated so far, which a continued "
                "piece would not count")
    if backend is Backend.SGLANG and sampling.stop:
        return ("stop strings on SGLang: one that spans a seam cannot be cut where the server "
                "would (SGLang returns no per-token text offsets)")
    return None


@dataclass(frozen=True, slots=True)
class MoveSettings:
    """How running responses move. ``moves`` is the user's switch, ``policy`` the router's;
    ``blocked`` says what else keeps them off (the engine's or the sampling's: see
    ``sampling_off_reason``; None: nothing). ``piece_tokens`` caps a movable response's pieces
    (None: ``piece_cap``'s rule); ``gate``: the balance gate may turn moves
    off where they are measured not to pay; ``stall``: when a replica counts as hung."""

    moves: bool = True
    policy: str = MOVING_POLICY
    piece_tokens: int | None = None
    gate: bool = True
    stall: StallSettings = field(default_factory=StallSettings)
    blocked: str | None = None

    def __post_init__(self) -> None:
        if self.piece_tokens is not None and self.piece_tokens < 1:
            raise ConfigError(f"piece_tokens must be >= 1, got {self.piece_tokens}")

    @property
    def off_reason(self) -> str | None:
        """Why running responses never move under these settings (None: they may; the gate
        decides further, step by step)."""
        if not self.moves:
            return "moves=False"
        if self.policy != MOVING_POLICY:
            return (f"policy {self.policy!r} does not move running responses "
                    f"(only {MOVING_POLICY!r})")
        return self.blocked

    @property
    def on(self) -> bool:
        """Whether running responses move (``moves`` on and nothing in the way)."""
        return self.off_reason is None

    def piece_cap(self, interrupts: bool) -> int | None:
        """The piece cap of a response that may move: ``piece_tokens``, else ``PIECE_TOKENS``
        where a move waits for the running piece's end, else None (one piece, which a move
        ends at once: the runner ``interrupts`` it)."""
        return self.piece_tokens if self.piece_tokens is not None or interrupts else PIECE_TOKENS


__all__ = ["CONTINUABLE_BACKENDS", "MOVING_POLICY", "PIECE_TOKENS", "MoveSettings",
           "sampling_off_reason"]
