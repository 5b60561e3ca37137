"""``/metrics`` in Prometheus text format with vLLM's metric names and labels.

Gauges and token counters are computed from the engine at scrape time, so they move while
requests run (``vllm:generation_tokens_total`` counts tokens as they are produced, as vLLM
does per step). Latency histograms are observed when sequences finish. Each server has its
own ``CollectorRegistry``; nothing is process-global.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tailsieve.runtime.emulator.driver import EngineDriver
from tailsieve.runtime.emulator.prefix_cache import PrefixCache

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
FINISHED_REASONS = ("stop", "length", "abort")
_LATENCY_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)


class _EngineCollector(Collector):
    """Reads gauges and counters from the driver on every scrape."""

    def __init__(self, driver: EngineDriver, model_name: str, success: dict[str, int],
                 prefix_cache: PrefixCache | None = None) -> None:
        self._driver = driver
        self._prefix_cache = prefix_cache
        self._labels = {"model_name": model_name, "engine": "0"}
        self._success = success
        self._block_tokens = prefix_cache.block_tokens if prefix_cache is not None else 16

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        g = GaugeMetricFamily(name, doc, labels=list(self._labels))
        g.add_metric(list(self._labels.values()), value)
        return g

    def _counter(self, name: str, doc: str, value: float) -> CounterMetricFamily:
        c = CounterMetricFamily(name, doc, labels=list(self._labels))
        c.add_metric(list(self._labels.values()), value)
        return c

    def _cache_config(self, kv_tokens: int) -> GaugeMetricFamily:
        """``vllm:cache_config_info`` (1.0, the cache's settings as labels), with the labels
        that give the KV size: ``block_size``, ``num_gpu_blocks`` and ``kv_cache_size_tokens``
        (this replica's ``kv_capacity_tokens``)."""
        block = self._block_tokens
        info = {"block_size": str(block), "num_gpu_blocks": str(kv_tokens // block),
                "kv_cache_size_tokens": str(kv_tokens),
                "enable_prefix_caching": str(self._prefix_cache is not None)}
        g = GaugeMetricFamily("vllm:cache_config_info", "Information of the LLMEngine "
                              "CacheConfig", labels=[*info, *self._labels])
        g.add_metric([*info.values(), *self._labels.values()], 1.0)
        return g

    def collect(self) -> Iterator[Metric]:
        d = self._driver
        d.sync()
        yield self._gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            d.num_running,
        )
        yield self._gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            d.num_waiting,
        )
        kv_cap = d.engine.config.kv_capacity_tokens
        cap = d.engine.config.max_num_seqs
        by_seqs = d.num_running / cap if cap else 0.0
        usage = d.engine.kv_tokens() / kv_cap if kv_cap else by_seqs
        usage = min(max(usage, 0.0), 1.0)  # the running sums' rounding, never below 0
        yield self._gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", usage
        )
        yield self._counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.",
            d.engine.num_preemptions,
        )
        if kv_cap:  # vLLM's engine info gauge: its KV size among the labels
            yield self._cache_config(kv_cap)
        yield self._counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", d.stats.prompt_tokens
        )
        yield self._counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            d.stats.finished_tokens + d.running_tokens(),
        )
        pc = self._prefix_cache
        if pc is not None:  # vLLM's names: prompt tokens looked up / found cached
            yield self._counter(
                "vllm:prefix_cache_queries",
                "Prefix cache queries, in terms of number of queried tokens.",
                pc.query_tokens,
            )
            yield self._counter(
                "vllm:prefix_cache_hits",
                "Prefix cache hits, in terms of number of cached tokens.",
                pc.hit_tokens,
            )
        c = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*self._labels, "finished_reason"],
        )
        for reason in FINISHED_REASONS:
            c.add_metric([*self._labels.values(), reason], self._success.get(reason, 0))
        yield c


class EmulatorMetrics:
    """The registry of one emulator plus the hooks its handlers call."""

    def __init__(self, driver: EngineDriver, model_name: str,
                 prefix_cache: PrefixCache | None = None) -> None:
        """``prefix_cache``: the replica's, reported as ``vllm:prefix_cache_queries`` and
        ``vllm:prefix_cache_hits`` (tokens, as vLLM counts them)."""
        self.registry = CollectorRegistry(auto_describe=False)
        self._success: dict[str, int] = {}
        self.registry.register(_EngineCollector(driver, model_name, self._success, prefix_cache))
        labels = ["model_name", "engine"]
        self._label_values = (model_name, "0")
        self._e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of end to end request latency in seconds.",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._gen = Histogram(
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            labels,
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000),
            registry=self.registry,
        )

    def finished(self, reason: str, num_tokens: int, e2e_s: float) -> None:
        """Record one finished sequence (reason: stop, length or abort)."""
        self._success[reason] = self._success.get(reason, 0) + 1
        self._e2e.labels(*self._label_values).observe(e2e_s)
        self._gen.labels(*self._label_values).observe(num_tokens)

    def first_token(self, ttft_s: float) -> None:
        self._ttft.labels(*self._label_values).observe(ttft_s)

    def render(self) -> bytes:
        return generate_latest(self.registry)
