"""The proxy's ``/metrics`` (Prometheus text format), read at each scrape.

From the gateway (``GatewayStats``): turns, pieces, moves at turn boundaries and mid-turn,
relocations after faults, prefix-cache tokens queried and hit, re-prefilled tokens,
re-balance checks and crashes, and per server its health, running and waiting turns, tool
waits, context and turns / pieces placed, whether it is in service, since when and why
(``tailsieve_replica_state``); why moves are off (``observe_moves``); from the proxy: requests
by route and status, refusals by route and reason, samples aborted, sessions held and the cost
model in use.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from tailsieve.runtime.execution.observe_moves import moves_families
from tailsieve.runtime.proxy.service import ProxyService

__all__ = ["CONTENT_TYPE_LATEST", "ProxyMetrics"]


class ProxyMetrics:
    """The proxy's metrics: ``count`` each answered request, ``render`` for a scrape.
    ``service()`` is the running service (None until the servers are known)."""

    def __init__(self, service: Callable[[], ProxyService | None], endpoints: Callable[[], Sequence[str]],
                 profile: str, profile_in_use: Callable[[], str]) -> None:
        self._service = service
        self._endpoints = endpoints
        self._profile = profile
        self._profile_in_use = profile_in_use
        self.requests: Tally[tuple[str, int]] = Tally()
        self.refusals: Tally[tuple[str, str]] = Tally()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def count(self, route: str, status: int) -> None:
        self.requests[(route, status)] += 1

    def refuse(self, route: str, reason: str) -> None:
        """An error answered (``ApiError.reason``: why)."""
        self.refusals[(route, reason)] += 1

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        req = CounterMetricFamily("tailsieve_proxy_requests", "Requests answered",
                                  labels=["route", "code"])
        for (route, code), n in sorted(self.requests.items()):
            req.add_metric([route, str(code)], n)
        yield req
        ref = CounterMetricFamily("tailsieve_proxy_refusals", "Requests answered with an "
                                  "error, by reason", labels=["route", "reason"])
        for (route, reason), n in sorted(self.refusals.items()):
            ref.add_metric([route, reason], n)
        yield ref
        prof = GaugeMetricFamily("tailsieve_profile_info", "The cost model (profile asked, "
                                 "profile in use)", labels=["profile", "in_use"])
        prof.add_metric([self._profile, self._profile_in_use()], 1.0)
        yield prof
        svc = self._service()
        if svc is None:
            yield from moves_families("the servers have not registered yet")
            return
        yield from _service_families(svc, list(self._endpoints()))


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _service_families(svc: ProxyService, urls: list[str]) -> Iterator[Metric]:
    st = svc.gateway.stats()
    yield _gauge("tailsieve_proxy_samples_running", "Samples being generated",
                 svc.num_running_samples)
    yield _counter("tailsieve_proxy_samples_aborted", "Samples ended by /abort_request",
                   svc.num_aborted_samples)
    yield _gauge("tailsieve_proxy_sessions", "Session slots held for client keys",
                 len(svc.table))
    yield _counter("tailsieve_session_turns", "Turns delivered", st.num_turns)
    yield _counter("tailsieve_session_failed_turns", "Turns that failed or were cancelled",
                   st.num_failed_turns)
    yield _gauge("tailsieve_session_turns_running", "Turns running", st.num_running)
    yield _counter("tailsieve_session_pieces", "Pieces completed", st.num_pieces)
    moves = CounterMetricFamily("tailsieve_session_moves", "Turns moved to another server",
                                labels=["kind"])
    moves.add_metric(["boundary"], st.moves_at_boundary)
    moves.add_metric(["mid_turn"], st.moves_mid_turn)
    yield moves
    yield _counter("tailsieve_session_relocations", "Pieces continued elsewhere after a fault",
                   st.num_relocations)
    yield _counter("tailsieve_prefix_query_tokens", "Prompt tokens of every piece sent",
                   st.prefix_query_tokens)
    yield _counter("tailsieve_prefix_hit_tokens", "Of them, found in a prefix cache",
                   st.prefix_hit_tokens)
    yield _gauge("tailsieve_prefix_hit_rate", "Prefix hit tokens / query tokens",
                 st.prefix_hit_rate)
    yield _counter("tailsieve_reprefill_tokens", "Context tokens prefilled again after a move",
                   st.reprefill_tokens)
    yield _counter("tailsieve_rebalancer_checks", "Mid-turn re-balance checks",
                   st.rebalancer_checks)
    yield _counter("tailsieve_rebalancer_crashes", "Mid-turn rebalancer crashes",
                   st.rebalancer_crashes)
    yield from moves_families(st.moves_off_reason)
    healthy = GaugeMetricFamily("tailsieve_replica_healthy", "1 when the server is in service",
                                labels=["replica", "url"])
    state = GaugeMetricFamily("tailsieve_replica_state", "Unix time since which the server is "
                              "in or out of service; reason: the error that took it out",
                              labels=["replica", "state", "reason"])
    health = svc.gateway.health
    gauges = {k: GaugeMetricFamily(f"tailsieve_replica_{k}", doc, labels=["replica"]) for k, doc in (
        ("running", "Turns decoding there"), ("waiting", "Turns queued there"),
        ("tool_waits", "Sessions between turns whose home it is"),
        ("context_tokens", "Context of its running turns"))}
    counters = {k: CounterMetricFamily(f"tailsieve_replica_{k}", doc, labels=["replica"])
                for k, doc in (("turns", "Turns placed there"), ("pieces", "Pieces run there"))}
    for r in st.replicas:
        i = str(r.replica)
        healthy.add_metric([i, urls[r.replica] if r.replica < len(urls) else ""],
                           1.0 if r.healthy else 0.0)
        why = health.last_error[r.replica] if not r.healthy else None
        state.add_metric([i, "in" if r.healthy else "out", why.split(":")[0] if why else ""],
                         health.since_s[r.replica])
        for k, v in (("running", r.num_running), ("waiting", r.num_waiting),
                     ("tool_waits", r.num_tool_waits), ("context_tokens", r.context_tokens)):
            gauges[k].add_metric([i], v)
        counters["turns"].add_metric([i], r.num_turns)
        counters["pieces"].add_metric([i], r.num_pieces)
    yield healthy
    yield state
    yield from gauges.values()
    yield from counters.values()
