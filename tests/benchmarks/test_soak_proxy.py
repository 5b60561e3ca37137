"""The proxy's soak, short: ``tailsieve serve`` over four emulated replicas for 75 s at a
steady load, one replica killed, one hung (SIGSTOP for 15 s, then SIGCONT) and one restarted
on its port: every request answered once and whole (forced lengths, token-exact), the
restarted replica taken back, ``/health`` 200 at the end. The full 10-minute run is
``benchmarks/soak_proxy.py`` (BENCHMARKS.md)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from smoke_helpers import repo_unchanged

HANG_S = 15.0


@pytest.mark.slow
def test_soak_proxy_short(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    argv = ["--duration-s", "75", "--hang-s", str(HANG_S), "--rate", "6",
            "--client-timeout-s", "240", "--out", str(out)]
    with repo_unchanged():
        r = importlib.import_module("soak_proxy").main(argv)
    assert [f["fault"] for f in r["faults"]] == ["SIGKILL", "SIGSTOP", "SIGCONT",
                                                "SIGKILL (restart)", "restarted"]
    assert r["requests"] >= 0.9 * 75 * 6
    assert r["ok"], {k: r[k] for k in ("failed", "failures", "examples", "duplicates", "lost")}
    assert r["answered_whole"] == r["requests"] and r["duplicates"] == r["lost"] == 0
    served = r["proxy_metrics"]['tailsieve_proxy_requests_total{code="200",route="completions"}']
    assert served == r["requests"]  # each answered once by the proxy too
    healthy = {k.split('replica="')[1].split('"')[0]: v for k, v in r["proxy_metrics"].items()
               if k.startswith("tailsieve_replica_healthy")}
    assert healthy["0"] == 0.0 and healthy["2"] == 1.0  # the killed one out, the restarted in
    assert r["health_at_end"] == 200
    # bounded: nothing waits past the hang's end (hung-server detection will tighten this)
    assert r["latency_s_max"] < HANG_S + 15.0
