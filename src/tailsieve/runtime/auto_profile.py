"""The live side of the ``auto`` profile for ``TailSieveRollout``: an online fit fed by the
step's own pieces, and a probe at start.

Every request the live executor sends (a whole response, or a piece of a chained one) is
timed where it is sent, as the session gateway times its pieces: ``LiveExecutor.timings`` is
this profile's ``OnlineProfile`` (``model.online_profile``), fed by
``runtime.sessions.profile.record_piece`` with the replica, the send and answer times on the
event loop's clock, the prompt tokens and the tokens each response generated, read off the
piece's ``PieceOutput`` (no transport is wrapped). A streamed request's first token is also a
time to first token of the prompt tokens the server says it did not find in its prefix cache
(SGLang's ``cached_tokens``; vLLM's ``prompt_tokens_details`` when it reports them): a prefill
whose cache hits are unknown says nothing about the prefill rate. Cancelled and failed
requests are recorded as such: they still ran on their replica.

``AutoProfile`` ties it together: ``probe`` once when no fallback profile is named
(``runtime.auto_probe``: the model used until the fit is trusted), ``current()`` between
steps::

    auto = AutoProfile(fallback=None)             # "auto"; AutoProfile("cpu") is "auto:cpu"
    executor.timings = auto.online                # every request of the steps is timed
    await auto.probe(executor.piece_runner(), replicas, load=64)
    ...
    model = auto.current()                        # a ThroughputModel; refits when there is news

``current()`` refits on what arrived since the last call (up to ~1 s at 2,000 requests in
flight on a loaded 2-core machine): call it between steps, or off the hot path.
"""

from __future__ import annotations

from collections.abc import Sequence

from tailsieve.model.online_fit import FitSettings
from tailsieve.model.online_profile import OnlineProfile
from tailsieve.model.profiles import load_profile
from tailsieve.model.throughput import ThroughputModel
from tailsieve.runtime.auto_probe import ProbeSettings, probe_replicas
from tailsieve.runtime.sessions.http_runner import HttpPieceRunner


class AutoProfile:
    """``profile='auto'`` in a live rollout: an ``OnlineProfile`` fed by the executor's
    requests, with a named fallback (``auto:NAME``) or, without one, a short ``probe``."""

    def __init__(self, fallback: str | None = None, settings: FitSettings | None = None,
                 probe: ProbeSettings | None = None) -> None:
        self.fallback_name = fallback
        model = load_profile(fallback) if fallback is not None else None
        self.online = OnlineProfile(model, settings)
        self.probe_settings = probe or ProbeSettings()
        self.probed = False

    @property
    def needs_probe(self) -> bool:
        return self.fallback_name is None and not self.probed

    def current(self) -> ThroughputModel:
        return self.online.current()

    async def probe(self, runner: HttpPieceRunner, replicas: Sequence[int],
                    load: int) -> ThroughputModel:
        """Measure ``replicas`` of ``runner`` with the short lockstep probe
        (``runtime.auto_probe``) and use the result until the fit is trusted. The probe's
        requests are not observations (they are not timed into the fit): a round of requests
        sent at once reaches the server over a spread of time the router cannot see, which
        biases a fit, while the difference of two rounds' median end times cancels it."""
        measured = await probe_replicas(runner, replicas, load, self.probe_settings)
        self.online.fallback = measured
        self.probed = True
        return measured
