"""The ``auto`` profile: a decode curve that keeps fitting itself to the replicas it times.

``OnlineProfile`` is fed the router's own bookkeeping of its generation requests (which
replica, sent when, answered when, prompt and generated tokens: ``request_started`` /
``request_ended``) or ready-made observations, and answers ``current()``: the fitted
``ThroughputModel`` once the fit is trusted (``FitQuality.ready``), else the fallback (a named
profile), else the best fit so far (e.g. from a short probe's requests). Pure: times are passed
in (seconds on the caller's monotonic clock); the runtime's glue is
``tailsieve.runtime.execution.profile``.

::

    prof = OnlineProfile(fallback=load_profile("qwen3-4b-h100"))
    rid = prof.request_started("http://r0", t_sent, prompt_tokens=812)
    ...
    prof.request_ended(rid, t_answered, tokens=[517], complete=True)
    model = prof.current()          # a ThroughputModel (tau(b) + k * C, prefill)
    prof.quality                    # FitQuality: observations, batch range, error, ready
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

from tailsieve.errors import ProfileError
from tailsieve.model.decode_observations import DecodeLedger, PieceObservation, PrefillObservation
from tailsieve.model.online_fit import DecodeFit, FitQuality, FitSettings, fit_decode, fit_prefill
from tailsieve.model.prefill import PrefillModel
from tailsieve.model.profiles import AUTO
from tailsieve.model.replica_config import prefill_model_of
from tailsieve.model.replica_speeds import fit_speeds, normalized
from tailsieve.model.throughput import ThroughputModel


class OnlineProfile:
    """Observations in, a ``ThroughputModel`` out (see the module docstring)."""

    def __init__(
        self,
        fallback: ThroughputModel | None = None,
        settings: FitSettings | None = None,
        name: str = AUTO,
        max_observations: int = 1024,
        max_num_seqs: int | None = None,
        max_per_replica: int | None = 256,
    ) -> None:
        """``fallback``: used until the fit is ready (None: the best fit so far);
        ``max_observations``: the fit uses the most recent ones; ``max_num_seqs``: the
        engines' running cap, if any (default: the fallback's); ``max_per_replica``: at most
        this many new pieces per replica are turned into observations per update."""
        if max_observations < 2:
            raise ProfileError(f"max_observations must be >= 2, got {max_observations}")
        self.fallback = fallback
        self.settings = settings or FitSettings()
        self.name = name
        cap = max_num_seqs if max_num_seqs is not None else (
            fallback.max_num_seqs if fallback is not None else None)
        self.ledger = DecodeLedger(max_num_seqs=cap)
        self.max_per_replica = max_per_replica
        self._obs: deque[PieceObservation] = deque(maxlen=max_observations)
        self._prefill: deque[PrefillObservation] = deque(maxlen=max_observations)
        self._fit: DecodeFit | None = None
        self._model: ThroughputModel | None = None  # the latest fit
        self._ready_model: ThroughputModel | None = None  # the latest fit that was ready
        self._dirty = False
        self._speeds: dict[str, float] = {}  # replica -> its speed factor (``speeds``)
        self.num_seen = 0  # observations added in all (not only those kept)

    # -- feeding -------------------------------------------------------------------------------

    def request_started(self, replica: str, t_s: float, prompt_tokens: int, num_seqs: int = 1,
                        max_tokens: int | None = None) -> int:
        """A generation request was sent; the id goes to ``request_ended``."""
        return self.ledger.start(replica, t_s, prompt_tokens, num_seqs, max_tokens)

    def request_ended(self, request_id: int, t_s: float, tokens: Sequence[int] | None,
                      complete: bool, prompt_tokens: int | None = None,
                      first_token_s: float | None = None, sent_s: float | None = None,
                      prefill_tokens: int | None = None) -> None:
        """It was answered (``complete``: ``tokens`` per sequence exact) or cancelled / failed;
        ``prompt_tokens`` as the server counted them. A streamed one whose first token came at
        ``first_token_s`` after ``prefill_tokens`` uncached prompt tokens (sent at ``sent_s``)
        is also a time to first token."""
        self.ledger.end(request_id, t_s, tokens, complete, prompt_tokens)
        if (first_token_s is not None and sent_s is not None and prefill_tokens
                and first_token_s > sent_s):
            self.add_prefill([PrefillObservation(int(prefill_tokens), first_token_s - sent_s)])

    def add(self, observations: Iterable[PieceObservation]) -> None:
        """Timed pieces made elsewhere (validated on construction)."""
        for o in observations:
            if not isinstance(o, PieceObservation):
                raise ProfileError(f"expected PieceObservation, got {type(o).__name__}")
            self._obs.append(o)
            self.num_seen += 1
            self._dirty = True

    def add_prefill(self, observations: Iterable[PrefillObservation]) -> None:
        for o in observations:
            if not isinstance(o, PrefillObservation):
                raise ProfileError(f"expected PrefillObservation, got {type(o).__name__}")
            self._prefill.append(o)
            self._dirty = True

    # -- answers -------------------------------------------------------------------------------

    def update(self) -> DecodeFit | None:
        """Turn the requests answered since the last update into observations (timed on the
        current model's step clock) and refit when anything is new. Returns the fit."""
        clock = self._model if self._model is not None else self.fallback
        cap = self._obs.maxlen or 1
        per_replica = max(8, cap // max(self.ledger.num_replicas, 1))  # no more than are kept
        if self.max_per_replica is not None:
            per_replica = min(per_replica, self.max_per_replica)
        self.add(self.ledger.harvest(clock, per_replica))
        if self._dirty and self._obs:
            obs, trusted = list(self._obs), self._ready_model
            self._refit(obs)
            self._speeds = self._fit_speeds(obs)
            if any(f != 1.0 for f in self._speeds.values()):  # a mixed fleet: the shared
                self._ready_model = trusted  # curve at the typical speed, not the raw mix
                self._refit(normalized(obs, self._speeds))
                self._speeds = self._fit_speeds(obs)
        self._dirty = False
        return self._fit

    def _refit(self, obs: list[PieceObservation]) -> None:
        k0 = self.fallback.context_s_per_token if self.fallback is not None else 0.0
        self._fit = fit_decode(obs, self.settings, k0)
        self._model = self._fit.model(self.name, self._prefill_model(), self.fallback)
        if self._fit.quality.ready:
            self._ready_model = self._model

    def _fit_speeds(self, obs: list[PieceObservation]) -> dict[str, float]:
        """Each replica's factor against the curve ``current()`` answers, the fit's fixed
        cost per piece (HTTP, queueing: the same on every replica) taken off first."""
        model = self._priced()
        if model is None:
            return {}
        overhead = self._fit.overhead_s if self._fit is not None else 0.0
        s = self.settings
        return fit_speeds(obs, model, overhead, s.speed_prior_pieces, s.speed_band)

    def current(self) -> ThroughputModel:
        """The latest fit that was ready (a refit that is not, e.g. while the replicas' speed
        changed under the pieces, does not replace it), else the fallback, else the fit so
        far."""
        self.update()
        model = self._priced()
        if model is not None:
            return model
        raise ProfileError("auto profile: nothing timed yet and no fallback profile (probe "
                           "the replicas first, or give one: auto:NAME)")

    def speeds(self) -> dict[str, float]:
        """Each replica's speed factor against ``current()`` (``model.replica_speeds``: its
        decode and prefill take that many times the curve's; 1.0 for all on a fleet that
        looks homogeneous), keyed as the replicas were named to ``request_started``; a
        replica not timed yet has none (price it at 1)."""
        self.update()
        return dict(self._speeds)

    def _priced(self) -> ThroughputModel | None:
        if self._ready_model is not None:
            return self._ready_model
        return self.fallback if self.fallback is not None else self._model

    @property
    def quality(self) -> FitQuality | None:
        """The last fit's quality (None before any fit)."""
        return None if self._fit is None else self._fit.quality

    @property
    def ready(self) -> bool:
        """Whether ``current()`` is a fit (not the fallback)."""
        return self._ready_model is not None

    @property
    def num_observations(self) -> int:
        return len(self._obs)

    @property
    def observations(self) -> tuple[PieceObservation, ...]:
        """The timed pieces the fit uses (the most recent ``max_observations``)."""
        return tuple(self._obs)

    def _prefill_model(self) -> PrefillModel | None:
        fitted = fit_prefill(list(self._prefill), self.settings)
        if fitted is not None:
            return fitted
        return None if self.fallback is None else prefill_model_of(self.fallback)
