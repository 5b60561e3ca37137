"""How the live executor talks to replicas (``ExecutorConfig``), and replay's forced lengths."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tailsieve.errors import ConfigError
from tailsieve.runtime.engine.backends import Backend, SamplingParams
from tailsieve.runtime.execution.stall_watch import StallSettings

ForcedLength = Callable[[str, int], int]  # (prompt_id, sample) -> forced generated tokens


@dataclass(frozen=True, slots=True)
class ExecutorConfig:
    """How the live executor talks to replicas."""

    backend: Backend = Backend.VLLM
    model: str | None = None  # served model name; None = ask the servers (the one they serve)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    split_groups: bool = True  # n single requests per group (True) or one request with n
    stream: bool = False  # streaming responses (live tokens-so-far; more router CPU)
    request_timeout_s: float | None = 3600.0  # a request running longer = replica fault
    max_retries: int = 3  # retries of a request error before the step fails
    backoff_s: float = 0.25  # first retry delay; doubles per retry
    backoff_max_s: float = 8.0  # cap of the retry delay
    health_timeout_s: float = 5.0  # GET /health probe timeout
    probe_interval_s: float = 1.0  # a failed replica's /health is probed this often mid-step
    return_token_ids: bool = True  # ask vLLM for per-choice token ids (needed when n > 1)
    continuation: bool = False  # responses are chains of pieces: moves, faults lose one piece
    # (off: each response is one piece, restarted elsewhere by a fault)
    piece_tokens: int | None = None  # continuation: max tokens per piece (None = no bound)
    stream_interval: int | None = None  # streaming on vLLM: tokens per streamed chunk (vLLM's
    # per-request stream_interval, checked on vLLM 0.32); None: every token
    stall: StallSettings = field(default_factory=StallSettings)  # when a replica is hung

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.backoff_s < 0 or self.backoff_max_s < 0:
            raise ConfigError("backoff_s and backoff_max_s must be >= 0")
        if self.probe_interval_s <= 0:
            raise ConfigError(f"probe_interval_s must be > 0, got {self.probe_interval_s}")
        if self.piece_tokens is not None and self.piece_tokens < 1:
            raise ConfigError(f"piece_tokens must be >= 1, got {self.piece_tokens}")
        if self.piece_tokens is not None and not self.continuation:
            raise ConfigError("piece_tokens needs continuation=True")
        if self.continuation and self.stream and self.backend is not Backend.VLLM:
            raise ConfigError("continuation with stream=True needs the vllm backend (SGLang "
                              "pieces are interrupted by /abort_request without it)")
        if self.stream_interval is not None:
            if self.stream_interval < 1:
                raise ConfigError(f"stream_interval must be >= 1, got {self.stream_interval}")
            if not self.stream or self.backend is Backend.SGLANG:
                raise ConfigError("stream_interval needs stream=True on a vLLM backend")
        if self.request_timeout_s is not None and self.request_timeout_s <= 0:
            raise ConfigError(f"request_timeout_s must be > 0, got {self.request_timeout_s}")

    @property
    def defers_moves(self) -> bool:
        """A move waits for the running piece's end: vLLM pieces, unstreamed (cancelling one
        would drop what it generated)."""
        return not self.stream and self.backend is not Backend.SGLANG
