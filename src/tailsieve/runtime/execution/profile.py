"""The live cost model of every front door (the single-turn step, the session gateway and the
proxy and verl router over it): a named profile, fixed, or ``auto``, fitted online from the
pieces the front door itself times.

With ``auto`` (the default) every piece sent (a whole response or a piece of a chained one) is
timed into an ``OnlineProfile`` (``model.online_profile``, the fit of ``tau(b) + k * C``):
``time_piece`` where it is sent, ``record_piece`` where it ends, on the caller's clock, with
its replica, its prompt tokens (the server's count once it answers) and the tokens each
response generated (an interrupted piece's are exact too; a failed or cancelled one is
recorded as failed: it still ran on its replica). A streamed piece's first token is also a
time to first token of the prompt tokens the server says it did not find cached (SGLang's
``cached_tokens``; vLLM's ``prompt_tokens_details`` when it reports them). All of it is read
off the piece's ``PieceOutput``: runners of any kind feed it alike (HTTP, verl's Ray handles,
stubs), and no transport is wrapped.

``refit()`` refits on what arrived and answers the model to price with when it changed: the
fit once it is trusted, else the fallback (``auto:NAME``; for a bare ``auto`` the gateway's
``fallback_profile``, or the step's start-up ``probe``, ``execution.auto_probe``), and beside
it each replica's own speed factor (``speeds``: ``model.replica_speeds``, the shared curve its
prior until it has pieces of its own), so that a straggler is priced as one::

    live = LiveProfile("auto")                     # "auto:cpu": the cpu profile until the fit
    await live.probe(runner, replicas, load=64)    # no fallback named: measure one
    timed = live.time_piece(replica, sent_s, piece)
    ...
    live.record_piece(timed, sent_s, ended_s, [out])
    model = live.refit()                           # a ThroughputModel, or None: no change

A refit over the kept observations costs tens to hundreds of milliseconds of CPU, on the event
loop that relays every piece. Between steps that is free; within one (``refit(due_only=True)``,
the gateway's mid-turn checks) it runs only once ``REFIT_SHARE`` of the kept observations (at
least ``REFIT_MIN_PIECES``) ended since the last one, or a piece ended on a replica whose own
speed is not fitted yet while others' are (a straggler whose first pieces a move just cut),
and only where it can change the step
(``SessionGateway``: a running turn may move), else once every kept observation is new
(``turned_over``: a gateway that never idles between steps). A straggler that appears mid-step
on a fleet whose turns all run whole is therefore priced for new turns only at the next refit
(between steps, or at the turnover).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

from tailsieve.model.online_fit import FitSettings
from tailsieve.model.online_profile import OnlineProfile
from tailsieve.model.profiles import builtin_profile, load_profile, parse_profile
from tailsieve.model.throughput import ThroughputModel
from tailsieve.runtime.engine.http_runner import HttpPieceRunner
from tailsieve.runtime.engine.pieces import PieceOutput, PieceRequest, text_tokens
from tailsieve.runtime.execution.auto_probe import ProbeSettings, probe_replicas

REFIT_SHARE = 0.25  # a refit within a step waits until this share of the kept pieces is new
REFIT_MIN_PIECES = 8  # ... and at least this many
STAND_IN = "cpu"  # prices a bare ``auto`` without a fallback until its probe


class LiveProfile:
    """The model in use and, with ``auto``, the online fit that may replace it."""

    def __init__(self, spec: str, fallback: str | None = None,
                 settings: FitSettings | None = None) -> None:
        """``spec``: ``auto``, ``auto:NAME``, or a profile name / JSON path (fixed);
        ``fallback``: the profile a bare ``auto`` uses until its fit is trusted (None: the
        one ``probe`` measures)."""
        auto, name = parse_profile(spec)
        self.spec = spec
        self.fallback_name = name if name is not None else fallback
        named = load_profile(self.fallback_name) if self.fallback_name is not None else None
        self.model: ThroughputModel = named or builtin_profile(STAND_IN)
        self.online = OnlineProfile(named, settings) if auto else None
        self.speeds: dict[str, float] = {}  # replica -> speed factor (none: 1)
        self.num_new = 0  # pieces ended since the last refit
        self.unpriced = False  # a piece ended since the last refit on a replica ``speeds``
        # does not price yet, while it prices others

    @property
    def needs_probe(self) -> bool:
        """``auto`` with no fallback yet: ``probe`` measures one."""
        return self.online is not None and self.online.fallback is None

    @property
    def fitted(self) -> bool:
        """Whether the model in use is the online fit (not the fallback)."""
        fallback = None if self.online is None else self.online.fallback
        return fallback is not None and self.model is not fallback

    @property
    def in_use(self) -> str:
        """The model pricing moves now: ``fitted`` or the named profile."""
        return "fitted" if self.fitted else self.fallback_name or self.model.name

    @property
    def num_observations(self) -> int:
        """Timed pieces the fit has taken in (0 without ``auto``)."""
        return 0 if self.online is None else self.online.num_seen

    def time_piece(self, replica: Hashable, sent_s: float, piece: PieceRequest,
                   prompt_tokens: int | None = None) -> int | None:
        """``piece`` was sent to ``replica`` at ``sent_s``; the id goes to ``record_piece``
        (None: nothing is fitted). A text piece's prompt counts ``prompt_tokens`` (the caller's
        estimate; None: ``text_tokens``) until the server's count comes back."""
        if self.online is None:
            return None
        text = piece.prompt_text or "".join(m.get("content", "") for m in piece.messages or ())
        prompt = len(piece.prompt_ids) or prompt_tokens or text_tokens(text)
        return self.online.request_started(str(replica), sent_s, prompt, piece.num_samples,
                                           piece.max_tokens)

    def record_piece(self, piece_id: int | None, sent_s: float, ended_s: float,
                     outs: Sequence[PieceOutput] | None) -> None:
        """The piece ``piece_id`` (``time_piece``) ended at ``ended_s``: ``outs`` its
        responses (None: it failed or was cancelled; it still ran on its replica)."""
        if self.online is None or piece_id is None:
            return
        self.num_new += 1
        if outs and self.speeds and not self.unpriced:
            replica = self.online.ledger.replica_of(piece_id)
            self.unpriced = replica is not None and replica not in self.speeds
        if not outs:
            self.online.request_ended(piece_id, ended_s, None, False)
            return
        o = outs[0]
        prompt, cached = o.num_prompt_tokens, o.num_cached_tokens
        uncached = None if prompt is None or cached is None else max(prompt - cached, 0)
        first_s = next((sent_s + t for t, k in zip(o.chunk_times_s or (), o.chunk_tokens or (),
                                                   strict=False) if k > 0), None)
        self.online.request_ended(piece_id, ended_s, [x.num_generated for x in outs], True,
                                  prompt, first_s, sent_s, uncached)

    @property
    def refit_due(self) -> bool:
        """Whether enough pieces ended since the last refit for one within a step, or one
        on a replica not priced yet (see the module docstring)."""
        if self.online is None:
            return False
        return self.unpriced or self.num_new >= max(REFIT_MIN_PIECES,
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
        self.num_new, self.unpriced = 0, False
        model, speeds = self.online.current(), self.online.speeds()
        if model is self.model and speeds == self.speeds:
            return None
        self.model, self.speeds = model, speeds
        return model

    def speed_factors(self, replicas: Iterable[Hashable]) -> tuple[float, ...]:
        """Each of ``replicas``' speed factor (1 where none is fitted)."""
        return tuple(self.speeds.get(str(r), 1.0) for r in replicas)

    def restore(self, model: ThroughputModel) -> None:
        """Price with ``model`` (e.g. a checkpoint's) until the fit is trusted; no probe."""
        if self.online is not None:
            self.online.fallback = self.model = model

    async def probe(self, runner: HttpPieceRunner, replicas: Sequence[int], load: int,
                    settings: ProbeSettings | None = None) -> ThroughputModel:
        """Measure ``replicas`` of ``runner`` with the short lockstep probe
        (``execution.auto_probe``) and use the result until the fit is trusted (from the next
        ``refit``). The probe's requests are not timed into the fit: a round of requests
        sent at once reaches the server over a spread of time the router cannot see, which
        biases a fit, while the difference of two rounds' median end times cancels it."""
        measured = await probe_replicas(runner, replicas, load, settings or ProbeSettings())
        if self.online is not None:
            self.online.fallback = measured
        return measured
