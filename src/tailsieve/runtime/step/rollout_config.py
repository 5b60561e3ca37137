"""Settings of a live rollout (``TailSieveRollout``): what the trainer chooses, checked, and
what follows from it (whether responses move and why not, continuation, the piece cap, the
executor's config)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from tailsieve.errors import ConfigError
from tailsieve.model.profiles import check_profile, parse_profile
from tailsieve.runtime.engine.backends import Backend, SamplingParams
from tailsieve.runtime.execution.moves import MoveSettings, sampling_off_reason
from tailsieve.runtime.execution.stall_watch import StallSettings
from tailsieve.runtime.step.executor_config import ExecutorConfig, ForcedLength

MODEL_POLICIES = ("tailsieve", "tailsieve-fixed")  # policies whose controller uses the profile
LIVE_PROFILE = "auto"  # default cost model of a live rollout (RolloutConfig, the CLI): fitted
# online from the rollout's own timings (``runtime.execution.profile``)


@dataclass(frozen=True, slots=True)
class RolloutConfig:
    """Settings of a live rollout.

    Moves are on by default: with the ``tailsieve`` policy on a backend that can continue a
    response (vLLM's completions API, SGLang), running responses move between replicas while
    a step runs (continuation; vLLM without streaming in pieces of ``moves.PIECE_TOKENS``), and
    the controller's balance gate switches them off for steps where they are not measured to
    pay. ``moves=False`` turns them off: every response is one request, dealt round-robin.
    Where moves cannot run (another policy, a history-dependent penalty, stop strings on
    SGLang) they are off and ``moves_off_reason`` says why (``move``: the one set of move
    settings, ``runtime.execution.moves``) (logged once when the rollout is
    made, and the runtime's ``/metrics`` gauge ``tailsieve_moves_off{reason=...}``). With
    moves on, ``vllm-chat`` prompts are sent as the token ids the server's ``/tokenize`` gives
    their messages, on the completions API (``LiveExecutor.chat_as_tokens``; the same template, the
    same sampling).

    ``profile="auto"`` (the default): the controller's cost model is fitted online from the
    timings of the rollout's own requests (``model.online_profile``: ``tau(b) + k * C`` and
    the prefill rate), after a short probe of the replicas when the rollout starts;
    ``"auto:NAME"`` uses the named profile (or file) instead of the probe until the fit is
    trusted; a name or a file alone fixes the model.
    """

    num_groups: int  # N: groups per delivered batch
    group_size: int = 8  # n: responses per group
    policy: str = "tailsieve"  # uniform | uniform-requests | tailsieve-fixed | tailsieve
    backend: Backend = Backend.VLLM
    model: str | None = None  # served model name; None = the one model the servers serve
    sampling: SamplingParams = field(default_factory=SamplingParams)
    replay: ForcedLength | None = None  # forced length per (prompt_id, sample): replay mode
    profile: str = LIVE_PROFILE  # controller's cost model: "auto" (fitted online, probe first),
    # "auto:NAME" (fitted online, NAME until then), or a profile name / JSON path (fixed)
    split_groups: bool = True
    stream: bool = False
    stream_interval: int | None = None  # stream: tokens per streamed chunk on vLLM (vLLM's
    # stream_interval): moves keep what was streamed at a fraction of per-token streaming's CPU
    request_timeout_s: float | None = 3600.0
    stall: StallSettings = field(default_factory=StallSettings)  # when a replica is hung
    max_retries: int = 3
    controller: dict[str, Any] = field(default_factory=dict)  # ControllerConfig overrides
    return_token_ids: bool = True  # per-response token ids from vLLM (False: counts only)
    moves: bool = True  # move running responses between replicas while a step runs, where
    # they can run (see ``moves_off_reason``); False: no moves, round-robin plans
    continuation: bool | None = None  # responses as chains of pieces (a fault then loses only
    # the running piece); None: on exactly when moves run
    piece_tokens: int | None = None  # continuation: max tokens per piece (None: unbounded, or
    # moves.PIECE_TOKENS when moves need pieces: vLLM, unstreamed)
    move: MoveSettings = field(init=False, repr=False, compare=False)  # derived from the above

    def __post_init__(self) -> None:
        if self.num_groups < 1 or self.group_size < 1:
            raise ConfigError("num_groups and group_size must be >= 1")
        object.__setattr__(self, "backend", Backend(self.backend))
        check_profile(self.profile)
        blocked = sampling_off_reason(self.backend, self.sampling) or (
            "continuation=False" if self.continuation is False else None) or (
            "stream=True on SGLang: a streamed piece there cannot be cut and continued"
            if self.stream and self.backend is Backend.SGLANG else None)
        move = MoveSettings(self.moves, self.policy, self.piece_tokens, stall=self.stall,
                            blocked=blocked)
        if self.continuation is None:
            object.__setattr__(self, "continuation", move.on)
        if not self.split_groups and self.continuation:
            raise ConfigError(
                "split_groups=False (--no-split: one request with n responses per group) "
                "cannot run with continuation, which moves need (on by default): each response "
                "is then its own chain of requests; turn moves off (moves=False, --no-moves) "
                "or keep split_groups"
            )
        if self.piece_tokens is not None and not self.continuation:
            raise ConfigError(
                f"piece_tokens={self.piece_tokens} needs continuation (moves on, or "
                f"continuation=True); moves are off: {move.off_reason}"
            )
        interrupts = self.stream or self.backend is Backend.SGLANG  # a move ends a piece at once
        if move.on:
            move = replace(move, piece_tokens=move.piece_cap(interrupts))
            object.__setattr__(self, "piece_tokens", move.piece_tokens)
        object.__setattr__(self, "move", move)
        if self.drain_priority and (self.backend is Backend.SGLANG or not move.on):
            raise ConfigError(
                "drain priority (--drain-priority) is sent with the pieces of a balanced step "
                "to vLLM servers started with --scheduling-policy priority; "
                + ("SGLang pieces carry none" if self.backend is Backend.SGLANG
                   else f"moves are off: {move.off_reason}"))

    @property
    def drain_priority(self) -> bool:
        """Whether the balanced steps' pieces carry an engine priority (``core.drain``)."""
        return bool(self.controller.get("drain_priority"))

    @property
    def moves_off_reason(self) -> str | None:
        """Why running responses do not move in this rollout (None: they do)."""
        return self.move.off_reason

    @property
    def moves_active(self) -> bool:
        """Whether running responses move (``moves`` on and nothing in the way)."""
        return self.move.on

    @property
    def chat_as_tokens(self) -> bool:
        """Chat prompts go as token ids on the completions API (vllm-chat with continuation)."""
        return self.backend is Backend.VLLM_CHAT and bool(self.continuation)

    @property
    def fits_profile(self) -> bool:
        """Whether the controller's model is fitted online (``auto`` and a policy that uses
        a model)."""
        return parse_profile(self.profile)[0] and self.policy in MODEL_POLICIES

    def executor_config(self) -> ExecutorConfig:
        return ExecutorConfig(
            backend=Backend.VLLM if self.chat_as_tokens else self.backend,
            model=self.model,
            sampling=self.sampling,
            split_groups=self.split_groups,
            stream=self.stream,
            stream_interval=self.stream_interval,
            request_timeout_s=self.request_timeout_s,
            stall=self.stall,
            max_retries=self.max_retries,
            return_token_ids=self.return_token_ids,
            continuation=bool(self.continuation),
            piece_tokens=self.piece_tokens,
        )
