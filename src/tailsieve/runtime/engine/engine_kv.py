"""The engines' own account of their KV, read live from their Prometheus ``/metrics``.

vLLM (V1; the names checked against ``vllm/v1/metrics/loggers.py`` and a vLLM 0.32 server)
exposes, per engine (label ``engine``):

- ``vllm:kv_cache_usage_perc``: gauge, the share of KV blocks held by requests, 0..1 (vLLM
  before V1 and early V1: ``vllm:gpu_cache_usage_perc``). Blocks that only hold a cached prefix
  are free blocks there: they count as free, as the engine evicts them when it needs room;
- ``vllm:num_preemptions_total``: counter, the requests preempted for lack of KV so far;
- ``vllm:cache_config_info``: gauge 1.0 with the cache's settings as labels, among them
  ``num_gpu_blocks`` and ``block_size`` (their product: the KV size in tokens; newer
  versions also give ``kv_cache_size_tokens``).

``parse_kv_reading`` turns that text into a ``session.admission.KvReading`` (several engines
behind one server: their usage weighted by their size, their preemptions and sizes summed).
``KvPoller`` reads every replica every ``interval_s`` real seconds through a ``MetricsSource``
(``HttpPieceRunner``), within ``timeout_s``, and hands each reading to a sink (the gateway's
``LiveAdmission.measure``). A replica whose metrics cannot be read (``runtime.engine.faults``: it is
unreachable, answers an error, or its text has no KV usage, as an SGLang server without
``--enable-metrics``) gets ``None``: admission there goes by the book's model, which the log
says once per replica (and once more when its metrics come back). Nothing here decides.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

from prometheus_client.parser import text_string_to_metric_families

from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.runtime.engine.faults import RequestError, from_exception
from tailsieve.runtime.tasks import BackgroundTask
from tailsieve.session.admission import KvReading

log = logging.getLogger(__name__)

__all__ = ["KvPoller", "MetricsSource", "parse_kv_reading"]

USAGE_METRICS = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
PREEMPTIONS_METRIC = "vllm:num_preemptions_total"
CACHE_CONFIG_METRIC = "vllm:cache_config_info"
_KV_LINES = re.compile(  # the sample lines of the metrics read (a server exports hundreds)
    "\n((?:" + "|".join(map(re.escape, (*USAGE_METRICS, PREEMPTIONS_METRIC, CACHE_CONFIG_METRIC)))
    + ")[{ ][^\n]*)")


@runtime_checkable
class MetricsSource(Protocol):
    """A runner that can read a replica's Prometheus ``/metrics`` text (optional)."""

    async def metrics(self, replica: int, timeout_s: float) -> str:
        """``replica``'s ``/metrics`` body; ``ReplicaError`` (``runtime.engine.faults``) when it
        cannot be read."""
        ...


def parse_kv_reading(text: str, where: str = "/metrics") -> KvReading:
    """The KV reading in a Prometheus text exposition ``text`` (see the module docstring);
    ``RequestError`` when one of its lines is malformed or it has no KV usage gauge. Only
    the lines of these metrics are parsed."""
    usage: dict[str, float] = {}  # engine -> share in use
    size: dict[str, int] = {}  # engine -> KV tokens
    preempted = 0.0
    try:
        for family in text_string_to_metric_families(
                "\n".join(_KV_LINES.findall("\n" + text)) + "\n"):
            for s in family.samples:
                engine = s.labels.get("engine", "0")
                if s.name in USAGE_METRICS:
                    usage[engine] = float(s.value)
                elif s.name == PREEMPTIONS_METRIC:
                    preempted += float(s.value)
                elif s.name == CACHE_CONFIG_METRIC:
                    tokens = _size_tokens(s.labels)
                    if tokens is not None:
                        size[engine] = tokens
    except ValueError as exc:
        raise RequestError(f"{where}: malformed Prometheus text: {exc}") from exc
    if not usage:
        raise RequestError(f"{where}: no KV usage gauge ({' or '.join(USAGE_METRICS)})")
    values = list(usage.values())
    if not all(math.isfinite(v) and -1e-9 <= v <= 1.0 + 1e-9 for v in values) \
            or not math.isfinite(preempted) or preempted < 0:
        raise RequestError(f"{where}: KV usage {values} or preemptions {preempted} out of "
                           "range")
    capacity = sum(size[e] for e in usage) if set(size) >= set(usage) else None
    if capacity:
        share = sum(u * size[e] for e, u in usage.items()) / capacity
    else:
        share, capacity = sum(values) / len(values), None
    return KvReading(min(max(share, 0.0), 1.0), int(preempted), capacity)


def _size_tokens(labels: dict[str, str]) -> int | None:
    """An engine's KV size in tokens from ``vllm:cache_config_info``'s labels:
    ``kv_cache_size_tokens`` where given, else ``num_gpu_blocks`` x ``block_size`` (None:
    neither)."""
    for keys in (("kv_cache_size_tokens",), ("num_gpu_blocks", "block_size")):
        try:
            values = [int(labels[k]) for k in keys]
        except (KeyError, ValueError):
            continue
        if all(v > 0 for v in values):
            return math.prod(values)
    return None


Sink = Callable[[int, KvReading | None], None]


class KvPoller:
    """Reads the KV of replicas ``0..num_replicas - 1`` every ``interval_s`` real seconds
    (see the module docstring). ``start()`` / ``await aclose()``; ``await poll_once()`` reads
    once."""

    def __init__(self, read: Callable[[int, float], Awaitable[str]], num_replicas: int,
                 sink: Sink, interval_s: float = 0.5, timeout_s: float = 2.0) -> None:
        if num_replicas < 1:
            raise ConfigError(f"num_replicas must be >= 1, got {num_replicas}")
        for name, v in (("interval_s", interval_s), ("timeout_s", timeout_s)):
            if not (math.isfinite(v) and v > 0):
                raise ConfigError(f"{name} must be a finite number > 0, got {v!r}")
        self._read = read
        self.num_replicas = num_replicas
        self._sink = sink
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.readings: list[KvReading | None] = [None] * num_replicas
        self.unread: dict[int, str] = {}  # replica -> why its metrics cannot be read
        self._task = BackgroundTask("kv-poller")

    @classmethod
    def of(cls, runner: object, num_replicas: int, sink: Sink,
           interval_s: float = 0.5) -> KvPoller | None:
        """A poller over ``runner`` when it can read metrics (``MetricsSource``), else None
        (logged: the book's model alone decides)."""
        if not isinstance(runner, MetricsSource):
            log.info("admission by KV room goes by the book's model: the runner (%s) cannot "
                     "read the engines' metrics", type(runner).__name__)
            return None
        return cls(runner.metrics, num_replicas, sink, interval_s)

    async def poll_once(self) -> None:
        """Read every replica now, each within ``timeout_s``, and hand the readings on."""
        got = await asyncio.gather(*(self._one(r) for r in range(self.num_replicas)))
        for r, reading in enumerate(got):
            self.readings[r] = reading
            self._sink(r, reading)

    async def _one(self, replica: int) -> KvReading | None:
        where = f"replica {replica} /metrics"
        try:
            async with asyncio.timeout(self.timeout_s):
                text = await self._read(replica, self.timeout_s)
            reading = parse_kv_reading(text, where)
        except (ReplicaError, OSError, TimeoutError) as exc:
            why = str(from_exception(where, exc))
            if replica not in self.unread:
                log.warning("%s cannot be read (%s): admission by KV room there goes by the "
                            "book's model", where, why)
            self.unread[replica] = why
            return None
        if self.unread.pop(replica, None) is not None:
            log.info("%s can be read again: admission by KV room there reads the engine's",
                     where)
        return reading

    async def _run(self) -> None:
        while True:
            await self.poll_once()
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        """Poll in the background (in the running event loop) until ``aclose``."""
        self._task.start(self._run)

    async def aclose(self) -> None:
        await self._task.aclose()

