"""The session gateway's cost model: a named profile, fixed, or ``auto``, fitted online from
the pieces the gateway itself times.

With ``profile="auto"`` (the default) every piece the gateway sends is recorded in an
``OnlineProfile`` (``model.online_profile``, helper I's fit of ``tau(b) + k * C``): its
replica, when it was sent and when it came back on the gateway's clock, its prompt tokens and
the tokens it generated (an interrupted piece's are exact too; a failed one is recorded as
failed). ``refit()``, called between steps (``SessionGateway.begin_step``), refits on what
arrived and returns the model to price with: the fit once it is trusted (``ready``), else the
fallback profile (``auto:NAME``, or ``GatewayConfig.fallback_profile`` for a bare ``auto``),
and beside it each replica's own speed factor (``speeds``: ``model.replica_speeds``, the shared
curve its prior until it has pieces of its own), so that a straggler is priced as one.
Runners of any kind feed it alike (HTTP, verl's Ray handles, stubs): no transport is wrapped.
The single-turn step's ``auto`` profile is fed from its pieces the same way (``time_piece``,
``record_piece``: what an engine answer says beyond the tokens, the prompt tokens the server
counted and, streamed, the time to its first token of the prompt tokens it did not find cached,
is read off the piece's ``PieceOutput``).

A refit over the kept observations costs tens to hundreds of milliseconds of CPU, and it runs
on the event loop that relays every piece. Between steps that is free; within one
(``refit(due_only=True)``, the mid-turn checks) it runs only once ``REFIT_SHARE`` of the kept
observations (at least ``REFIT_MIN_PIECES``) ended since the last one, and only where it can
change the step (``SessionGateway``: a running turn may move), else once every kept
observation is new (``turned_over``: a gateway that never idles between steps). A straggler
that appears mid-step on a fleet whose turns all run whole is therefore priced for new turns
only at the next refit (between steps, or at the turnover).
"""

from __future__ import annotations

from collections.abc import Sequence

from tailsieve.model.online_fit import FitSettings
from tailsieve.model.online_profile import OnlineProfile
from tailsieve.model.profiles import load_profile, parse_profile
from tailsieve.model.throughput import ThroughputModel
from tailsieve.runtime.sessions.pieces import PieceOutput, PieceRequest

REFIT_SHARE = 0.25  # a refit within a step waits until this share of the kept pieces is new
REFIT_MIN_PIECES = 8  # ... and at least this many
CHARS_PER_TOKEN = 4  # prompt tokens of a text prompt until the server's count comes back


class GatewayProfile:
    """The model in use and, with ``auto``, the online fit that may replace it."""

    def __init__(self, spec: str, fallback: str, settings: FitSettings | None = None) -> None:
        """``spec``: ``auto``, ``auto:NAME``, or a profile name / JSON path (fixed);
        ``fallback``: the profile a bare ``auto`` uses until its fit is trusted."""
        auto, name = parse_profile(spec)
        self.spec = spec
        self.fallback_name = name if name is not None else fallback
        self.model: ThroughputModel = load_profile(self.fallback_name)
        self.online = OnlineProfile(self.model, settings) if auto else None
        self.speeds: dict[int, float] = {}  # replica -> speed factor (none: 1)
        self.num_new = 0  # pieces ended since the last refit

    @property
    def fitted(self) -> bool:
        """Whether the model in use is the online fit (not a named profile)."""
        return self.online is not None and self.model is not self.online.fallback

    @property
    def in_use(self) -> str:
        """The model pricing moves now: ``fitted`` or the named profile."""
        return "fitted" if self.fitted else self.fallback_name

    @property
    def num_observations(self) -> int:
        """Timed pieces the fit has taken in (0 without ``auto``)."""
        return 0 if self.online is None else self.online.num_seen

    def piece_started(self, replica: int, t_s: float, prompt_tokens: int,
                      max_tokens: int) -> int | None:
        """A piece was sent; the id goes to ``piece_ended`` (None: nothing is fitted)."""
        if self.online is None:
            return None
        return self.online.request_started(str(replica), t_s, prompt_tokens, 1, max_tokens)

    def piece_ended(self, piece_id: int | None, t_s: float, num_tokens: int | None) -> None:
        """It came back at ``t_s`` with ``num_tokens`` (None: it failed)."""
        if self.online is None or piece_id is None:
            return
        tokens = None if num_tokens is None else [num_tokens]
        self.online.request_ended(piece_id, t_s, tokens, num_tokens is not None)
        self.num_new += 1

    @property
    def refit_due(self) -> bool:
        """Whether enough pieces ended since the last refit for one within a step (see the
        module docstring)."""
        if self.online is None:
            return False
        return self.num_new >= max(REFIT_MIN_PIECES,
                                   REFIT_SHARE * self.online.num_observations)

    @property
    def turned_over(self) -> bool:
        """Whether as many pieces ended since the last refit as the fit keeps."""
        return self.online is not None and self.num_new >= max(
            REFIT_MIN_PIECES, self.online.num_observations)

    def refit(self, due_only: bool = False) -> ThroughputModel | None:
        """Refit on the pieces timed since the last call (``due_only``: only when
        ``refit_due``); the model to price with when it or a replica's speed factor changed
        (else None)."""
        if self.online is None or (due_only and not self.refit_due):
            return None
        self.num_new = 0
        model = self.online.current()
        speeds = {int(r): f for r, f in self.online.speeds().items()}
        if model is self.model and speeds == self.speeds:
            return None
        self.model, self.speeds = model, speeds
        return model

    def speed_factors(self, num_replicas: int) -> tuple[float, ...]:
        """Every replica's speed factor (1 where none is fitted)."""
        return tuple(self.speeds.get(r, 1.0) for r in range(num_replicas))


def time_piece(online: OnlineProfile, replica: str, sent_s: float, piece: PieceRequest) -> int:
    """``piece`` was sent to ``replica`` at ``sent_s``; the id goes to ``record_piece``."""
    text = piece.prompt_text or "".join(m.get("content", "") for m in piece.messages or ())
    prompt = len(piece.prompt_ids) or len(text) // CHARS_PER_TOKEN + 1
    return online.request_started(replica, sent_s, prompt, piece.num_samples, piece.max_tokens)


def record_piece(online: OnlineProfile, piece_id: int, sent_s: float, ended_s: float,
                 outs: Sequence[PieceOutput] | None) -> None:
    """The piece ``piece_id`` (``time_piece``) ended at ``ended_s``: ``outs`` its responses
    (None: it failed or was cancelled; it still ran on its replica)."""
    if not outs:
        online.request_ended(piece_id, ended_s, None, False)
        return
    o = outs[0]
    prompt, cached = o.num_prompt_tokens, o.num_cached_tokens
    uncached = None if prompt is None or cached is None else max(prompt - cached, 0)
    first_s = next((sent_s + t for t, k in zip(o.chunk_times_s or (), o.chunk_tokens or (),
                                               strict=False) if k > 0), None)
    online.request_ended(piece_id, ended_s, [x.num_generated for x in outs], True, prompt,
                         first_s, sent_s, uncached)
