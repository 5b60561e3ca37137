"""Speculative decoding as a transformation of the throughput model.

A speculative step drafts ``d`` tokens and verifies them with the target model. In expectation
it emits ``E(a, d) = (1 - a^(d+1)) / (1 - a)`` tokens per request (``a`` = per-token acceptance
rate), and costs one target forward over ``b * (1 + d)`` tokens plus drafting. At low batch the
forward is memory-bound, so verifying extra tokens is nearly free; at high batch it is
compute-bound and verification dominates. We model the step time as
``tau(b * (1 + verify_weight * d)) * (1 + draft_cost * d)`` and the effective seconds per
emitted token per request as that divided by ``E``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import numpy as np

from tailsieve.errors import ConfigError
from tailsieve.model.throughput import ThroughputModel, ThroughputPoint


class SpecMethod(str, Enum):
    NONE = "none"
    MTP = "mtp"
    DFLASH = "dflash"
    EAGLE = "eagle"
    NGRAM = "ngram"


# Per-method defaults: (acceptance rate per drafted token, draft cost per drafted token
# relative to one target step). Illustrative values in the range reported for these methods.
SPEC_DEFAULTS: dict[SpecMethod, tuple[float, float]] = {
    SpecMethod.NONE: (0.0, 0.0),
    SpecMethod.MTP: (0.75, 0.04),
    SpecMethod.DFLASH: (0.72, 0.02),
    SpecMethod.EAGLE: (0.70, 0.06),
    SpecMethod.NGRAM: (0.40, 0.0),
}


@dataclass(frozen=True, slots=True)
class SpecConfig:
    """Speculative-decoding settings of one pool."""

    method: SpecMethod = SpecMethod.NONE
    num_speculative_tokens: int = 0  # draft depth d (block size for dflash)
    acceptance_rate: float | None = None  # per drafted token; None = method default
    draft_cost: float | None = None  # per drafted token, fraction of a target step; None = default
    verify_weight: float = 1.0  # how much each drafted token weighs in the verify forward
    model: str | None = None  # drafter model path (dflash / eagle), passed to vLLM

    def __post_init__(self) -> None:
        if self.num_speculative_tokens < 0:
            raise ConfigError(
                f"num_speculative_tokens must be >= 0, got {self.num_speculative_tokens}"
            )
        if self.method is SpecMethod.NONE and self.num_speculative_tokens != 0:
            raise ConfigError("method 'none' takes no speculative tokens")
        if self.method is not SpecMethod.NONE and self.num_speculative_tokens == 0:
            raise ConfigError(f"method {self.method.value!r} needs num_speculative_tokens >= 1")
        a = self.acceptance
        if not (0.0 <= a < 1.0):
            raise ConfigError(f"acceptance_rate must be in [0, 1), got {a}")
        if self.cost < 0 or not math.isfinite(self.cost):
            raise ConfigError(f"draft_cost must be >= 0, got {self.cost}")
        if self.verify_weight < 0:
            raise ConfigError(f"verify_weight must be >= 0, got {self.verify_weight}")

    @property
    def enabled(self) -> bool:
        return self.method is not SpecMethod.NONE

    @property
    def acceptance(self) -> float:
        return (
            self.acceptance_rate
            if self.acceptance_rate is not None
            else SPEC_DEFAULTS[self.method][0]
        )

    @property
    def cost(self) -> float:
        return self.draft_cost if self.draft_cost is not None else SPEC_DEFAULTS[self.method][1]

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens emitted per request per speculative step."""
        d, a = self.num_speculative_tokens, self.acceptance
        if d == 0 or a == 0.0:
            return 1.0
        return (1.0 - a ** (d + 1)) / (1.0 - a)

    @classmethod
    def parse(cls, text: str) -> SpecConfig:
        """Parse ``none``, ``METHOD:DEPTH`` or ``METHOD:DEPTH:ACCEPTANCE`` (e.g. ``mtp:3``)."""
        parts = text.strip().lower().split(":")
        try:
            method = SpecMethod(parts[0])
        except ValueError:
            names = ", ".join(m.value for m in SpecMethod)
            raise ConfigError(f"unknown speculative method {parts[0]!r}; choose {names}") from None
        if method is SpecMethod.NONE:
            if len(parts) > 1 and parts[1] not in ("", "0"):
                raise ConfigError("speculative method 'none' takes no depth")
            return cls()
        if len(parts) < 2:
            raise ConfigError(f"speculative config {text!r} needs a depth, e.g. {parts[0]}:3")
        try:
            depth = int(parts[1])
            acc = float(parts[2]) if len(parts) > 2 else None
        except ValueError:
            raise ConfigError(f"speculative config {text!r}: depth must be an integer") from None
        return cls(method=method, num_speculative_tokens=depth, acceptance_rate=acc)

    def label(self) -> str:
        return "none" if not self.enabled else f"{self.method.value}:{self.num_speculative_tokens}"

    def apply(self, model: ThroughputModel, max_batch: int = 1024) -> ThroughputModel:
        """Effective throughput model: seconds per *emitted* token per request at batch ``b``."""
        if not self.enabled:
            return model
        d = self.num_speculative_tokens
        b = np.arange(1, max_batch + 1, dtype=np.float64)
        step_s = model.tau_array(b * (1.0 + self.verify_weight * d)) * (1.0 + self.cost * d)
        eff = np.maximum.accumulate(step_s / self.tokens_per_step)
        pts = tuple(ThroughputPoint(int(bi), float(si)) for bi, si in zip(b, eff, strict=True))
        return ThroughputModel(
            points=pts,
            name=f"{model.name}+{self.label()}",
            source=model.source,
            context_s_per_token=model.context_s_per_token / self.tokens_per_step,
        )
