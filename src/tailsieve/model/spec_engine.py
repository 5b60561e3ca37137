"""A replica's decode step with speculation, priced from the throughput model.

One verify step at ``b`` running requests checks ``d`` drafted tokens per request as extra
query tokens, so it costs what the target model charges for ``b * (1 + d)`` tokens in one
forward, ``tau(b * (1 + d))``, plus drafting (``draft_cost * tau(b)``), and emits ``t`` tokens
per request (the acceptance model, ``t = tau_accept(source, k)``). The extra cost over a plain
step is multiplied by ``price`` (the guard "speculation at twice the model's price" is
``price = 2``). In the memory-bound regime the extra query tokens are nearly free and the
step emits ``t`` times more; once the forward is compute-bound they cost their share and the
gain falls below 1 (FastGRPO, arXiv 2509.21792: standard speculation < 1.0x at high
concurrency). The context term (KV reads) is paid once per verify step, so per emitted token
it is divided by ``t``.

``gate``: ``always`` speculates at every batch (a ``--speculative-config`` without a
schedule); ``pays`` speculates only at the batch sizes where it pays at a reference context
per running request (``ref_context_tokens``). That is a fixed rule by batch size, which is what
vLLM's ``num_speculative_tokens_per_batch_size`` schedule does (``batch_schedule`` gives it;
TLT's rule, arXiv 2511.16665, turns speculation on below 32 running). The simulator gives the
baseline and TailSieve the same gate. No live code prices, gates or places speculation: on a
real server the gate is that schedule, set at launch (docs/speculation-placement.md). A
throughput model has one context coefficient: the gated model takes the speculating one
(``k / t``) and carries the rest of a plain batch's context cost in that batch's points, exact
at the reference context.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from tailsieve.errors import ConfigError
from tailsieve.model.acceptance import AcceptanceCurve
from tailsieve.model.throughput import ThroughputModel, ThroughputPoint

FloatArray = npt.NDArray[np.float64]
Gate = Literal["always", "pays"]
GATES: tuple[str, ...] = ("always", "pays")


@dataclass(frozen=True, slots=True)
class SpecEngine:
    """Speculation of one replica: a draft source's acceptance, its price and its gate."""

    curve: AcceptanceCurve
    price: float = 1.0  # multiplies the extra cost of a verify step over a plain step
    gate: Gate = "always"
    ref_context_tokens: float = 2048.0  # per running request: ``pays`` is decided there and
    # the model is exact there

    def __post_init__(self) -> None:
        if not (math.isfinite(self.price) and self.price > 0):
            raise ConfigError(f"price must be a positive number, got {self.price}")
        if not (math.isfinite(self.ref_context_tokens) and self.ref_context_tokens >= 0):
            raise ConfigError("ref_context_tokens must be >= 0")
        if self.gate not in GATES:
            raise ConfigError(f"gate must be one of {GATES}, got {self.gate!r}")

    def label(self, k: float = 1.0) -> str:
        price = "" if self.price == 1.0 else f"x{self.price:g}"
        return f"{self.curve.name}{price}@k{k:g}/{self.gate}"

    def verify_step_s(self, base: ThroughputModel, b: npt.ArrayLike, k: float = 1.0) -> FloatArray:
        """Seconds of one verify step at batch ``b`` (zero context)."""
        bb = np.asarray(b, dtype=np.float64)
        plain = base.tau_array(bb)
        wide = base.tau_array(bb * (1.0 + self.curve.drafted(k)))
        extra = wide - plain + self.curve.draft_cost * plain
        return np.asarray(plain + self.price * extra, dtype=np.float64)

    def speedup(self, base: ThroughputModel, b: npt.ArrayLike, k: float = 1.0) -> FloatArray:
        """Tokens per second with speculation over without, at batch ``b`` (zero context)."""
        bb = np.asarray(b, dtype=np.float64)
        return np.asarray(base.tau_array(bb) * self.curve.tau(k)
                          / self.verify_step_s(base, bb, k), dtype=np.float64)

    def _per_token(self, base: ThroughputModel, k: float, max_batch: int,
                   dealt: int | None) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        """Per batch ``1..max_batch``: seconds per emitted token speculating and plain (both at
        the reference context), the context seconds held, and ``t``."""
        b = np.arange(1, max_batch + 1, dtype=np.float64)
        if dealt is None or self.curve.placement != "server":
            kb = np.full_like(b, float(k))
        else:
            kb = 1.0 + (float(k) - 1.0) * np.clip(1.0 - b / max(dealt, 1), 0.0, 1.0)
        t = np.array([self.curve.tau(x) for x in kb])
        d = np.array([self.curve.drafted(x) for x in kb])
        plain = base.tau_array(b)
        extra = base.tau_array(b * (1.0 + d)) - plain + self.curve.draft_cost * plain
        # whole steps at the reference context: speculation reads the KV once per verify
        # step, so per emitted token the context term is divided by t
        held = base.context_s_per_token * b * self.ref_context_tokens
        spec = (plain + self.price * extra) / t + held / t
        return spec, plain + held, held, t

    def batch_schedule(self, base: ThroughputModel, k: float = 1.0, max_batch: int = 1024,
                       dealt: int | None = None) -> tuple[tuple[int, int, int], ...]:
        """The gate as vLLM's ``num_speculative_tokens_per_batch_size``: inclusive batch
        ranges ``(first, last, num_speculative_tokens)``, ``max_spec_tokens`` where
        speculating is faster (``gate = always``: everywhere), 0 elsewhere."""
        spec, plain, _, _ = self._per_token(base, k, max_batch, dealt)
        on = np.ones(max_batch, dtype=bool) if self.gate == "always" else spec < plain
        out: list[tuple[int, int, int]] = []
        for i, flag in enumerate(on.tolist(), start=1):
            depth = self.curve.max_spec_tokens if flag else 0
            if out and out[-1][2] == depth:
                out[-1] = (out[-1][0], i, depth)
            else:
                out.append((i, i, depth))
        return tuple(out)

    def throughput(self, base: ThroughputModel, k: float = 1.0, max_batch: int = 1024,
                   dealt: int | None = None) -> ThroughputModel:
        """Effective throughput model: seconds per emitted token per request at batch ``b``
        (the simulator's and the balancer's price of a speculating replica). With ``gate =
        pays`` the replica decodes plainly where speculation does not pay.

        ``k`` and ``dealt`` matter only for a ``server`` curve (drafts from the group's
        finished siblings on this server). ``k``: the group's responses dealt to the replica;
        ``dealt``: requests dealt to it at the step's start. Given, at ``b`` running the
        replica has finished a fraction ``1 - b / dealt`` of its requests, so a response has
        ``1 + (k - 1) * (1 - b / dealt)`` of its group to draft from (1 at the start, ``k`` at
        the very end): a sibling helps only once it has finished there. None: ``k`` at every
        batch (the emulator's fixed ``--spec-k``)."""
        b = np.arange(1, max_batch + 1, dtype=np.float64)
        total, plain, _, t = self._per_token(base, k, max_batch, dealt)
        if self.gate == "pays":
            total = np.minimum(total, plain)
        # one context coefficient for the whole model, the tail's (k / t at b = 1); what a
        # batch's context costs beyond it stays in that batch's points, exact at the
        # reference context
        ctx = base.context_s_per_token / float(t[0])
        eff = total - ctx * b * self.ref_context_tokens
        eff = np.maximum.accumulate(eff)
        pts = tuple(ThroughputPoint(int(bi), float(si)) for bi, si in zip(b, eff, strict=True))
        return ThroughputModel(
            points=pts, name=f"{base.name}+{self.label(k)}", source=base.source,
            context_s_per_token=ctx, kv_capacity_tokens=base.kv_capacity_tokens,
            max_num_seqs=base.max_num_seqs, provenance=dict(base.provenance),
            prefill=base.prefill,
        )
