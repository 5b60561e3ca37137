"""Soak: ``tailsieve serve`` at a steady load for ``--duration-s`` (default 10 min) over
emulated vLLM replicas on 127.0.0.1, with one replica killed, one hung and one restarted.

Everything runs in its own process: ``--replicas`` emulators (``python -m
tailsieve.runtime.emulator``), the proxy (``tailsieve serve --endpoints ... --port 0``), and
this process's clients. Requests arrive at ``--rate`` per second (open loop: a stalled request
does not slow the arrivals), each the next turn of a session (``X-Session-ID``; ``--turns``
turns, the prompt the previous prompt plus the answer plus new tokens, as token ids) with a
forced length (``ignore_eos``, ``max_tokens`` drawn in ``[--min-tokens, --max-tokens]``,
``return_token_ids``). Every answer is checked whole and token-exact: HTTP 200, exactly
``max_tokens`` tokens, every one the emulator's (id 42, text `` tok``), finish ``length``.

The faults, at fractions of the duration (each once, each bounded in time):

- ``kill`` at 0.2: replica 0 gets SIGKILL and stays dead;
- ``hang`` at 0.4: replica 1 gets SIGSTOP, then SIGCONT after ``--hang-s`` (default 60 s);
- ``restart`` at 0.65: replica 2 gets SIGKILL, and after ``--restart-after-s`` a new emulator
  starts on its port (the proxy must take it back).

Reported: requests sent, answered whole, failed (by reason), duplicates (a request answered
twice: never expected), latency p50 / p99 / max per phase, requests slower than
``--stall-s`` (what a hang costs until hung servers are detected), the proxy's request count
and relocations from ``/metrics``, and whether ``/health`` answers 200 at the end. Exit status
1 when a request is lost, failed, duplicated or not whole (``--max-latency-s``, when given,
also fails a run whose slowest answer took longer).

    .venv/bin/python benchmarks/soak_proxy.py --out benchmarks/results/soak_proxy.json
    .venv/bin/python benchmarks/soak_proxy.py --duration-s 75 --hang-s 15 --rate 6
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
from outdir import command_line, default_out

from tailsieve.runtime.emulator import EmulatorFleet
from tailsieve.runtime.emulator.procs import EmulatorProcess, spawn, wait_ready
from tailsieve.runtime.emulator.responses import FILLER, FILLER_TOKEN_ID
from tailsieve.workload.shipped import portable_path

MODEL = "tailsieve-emulated"
PHASES = ("steady", "killed", "hung", "restarted", "after")


@dataclass(frozen=True, slots=True)
class SoakConfig:
    """The soak's shape (module docstring)."""

    duration_s: float = 600.0
    rate: float = 8.0  # requests per second
    replicas: int = 4
    turns: int = 4  # turns per session
    min_tokens: int = 32
    max_tokens: int = 400
    prompt_tokens: int = 64
    hang_s: float = 60.0
    restart_after_s: float = 5.0
    stall_s: float = 10.0
    client_timeout_s: float = 600.0
    time_scale: float = 1.0
    profile: str = "cpu"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.replicas < 3:
            raise ValueError(f"replicas must be >= 3 (one killed, one hung, one restarted), "
                             f"got {self.replicas}")
        for name in ("duration_s", "rate", "hang_s", "stall_s", "client_timeout_s",
                     "time_scale"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not 1 <= self.min_tokens <= self.max_tokens:
            raise ValueError("need 1 <= min_tokens <= max_tokens")
        if self.turns < 1 or self.prompt_tokens < 1:
            raise ValueError("turns and prompt_tokens must be >= 1")
        if not 0.4 * self.duration_s + self.hang_s < 0.65 * self.duration_s:
            raise ValueError(f"hang_s must end the hang before the restart (< 0.25 x "
                             f"duration_s = {0.25 * self.duration_s:g}), got {self.hang_s}")
        if self.restart_after_s < 0:
            raise ValueError(f"restart_after_s must be >= 0, got {self.restart_after_s}")

    def fault_times(self) -> dict[str, float]:
        """Seconds from the start at which each fault begins (and the hang ends)."""
        d = self.duration_s
        return {"kill": 0.2 * d, "hang": 0.4 * d, "cont": 0.4 * d + self.hang_s,
                "restart": 0.65 * d}


@dataclass(slots=True)
class Outcome:
    """One request: when it was sent, its phase, its latency and what was wrong (None: whole)."""

    rid: int
    phase: str
    sent_s: float
    latency_s: float = float("nan")
    problem: str | None = None


@dataclass(slots=True)
class Faults:
    """What was done to which replica, when (seconds from the start)."""

    log: list[dict[str, Any]] = field(default_factory=list)

    def note(self, t0: float, what: str, replica: int, pid: int) -> None:
        self.log.append({"t_s": round(time.monotonic() - t0, 2), "fault": what,
                         "replica": replica, "pid": pid})


def start_proxy(urls: list[str], log_path: Path, timeout_s: float = 60.0,
                ) -> tuple[subprocess.Popen[str], str]:
    """``tailsieve serve`` over ``urls`` on a free port; the process and its URL."""
    code = "import sys; from tailsieve.cli.main import main; sys.exit(main())"
    log = open(log_path, "w")  # noqa: SIM115 (the child writes it until stopped)
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "serve", "--endpoints", ",".join(urls), "--port", "0",
         "--host", "127.0.0.1", "--profile", "cpu"],
        stderr=subprocess.PIPE, stdout=log, stdin=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        log.write(line)
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            _drain(proc, log)
            return proc, m.group(1)
    proc.kill()
    raise RuntimeError(f"the proxy did not start (log {log_path})")


def _drain(proc: subprocess.Popen[str], log: Any) -> None:
    """Copy the proxy's stderr to its log in the background (a full pipe would block it)."""
    import threading

    def copy() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            log.write(line)
        log.close()

    threading.Thread(target=copy, daemon=True).start()


class Load:
    """Open-loop arrivals of session turns, each checked whole (module docstring)."""

    def __init__(self, cfg: SoakConfig, url: str, t0: float, phase: Any) -> None:
        self.cfg, self.url, self.t0, self.phase = cfg, url, t0, phase
        self.rng = np.random.default_rng(cfg.seed)
        self.outcomes: list[Outcome] = []
        self.answers: Counter[int] = Counter()
        self.idle: list[tuple[str, list[int], int]] = []  # session, context, turns done
        self.num_sessions = 0

    def _next_turn(self) -> tuple[str, list[int], int]:
        if self.idle:
            return self.idle.pop(0)
        self.num_sessions += 1
        base = [int(t) for t in self.rng.integers(100, 30000, self.cfg.prompt_tokens)]
        return f"soak-{self.num_sessions}", base, 0

    async def run(self, http: aiohttp.ClientSession) -> None:
        tasks: list[asyncio.Task[None]] = []
        k = 0
        while (now := time.monotonic() - self.t0) < self.cfg.duration_s:
            due = k / self.cfg.rate
            if due > now:
                await asyncio.sleep(due - now)
            tasks.append(asyncio.create_task(self.one(http, k)))
            k += 1
        await asyncio.gather(*tasks)

    async def one(self, http: aiohttp.ClientSession, rid: int) -> None:
        session, context, done = self._next_turn()
        want = int(self.rng.integers(self.cfg.min_tokens, self.cfg.max_tokens + 1))
        prompt = context + [int(t) for t in self.rng.integers(100, 30000, 8)]
        sent = time.monotonic()
        out = Outcome(rid, self.phase(sent - self.t0), round(sent - self.t0, 3))
        self.outcomes.append(out)
        body = {"model": MODEL, "prompt": prompt, "max_tokens": want, "ignore_eos": True,
                "return_token_ids": True, "temperature": 0.0}
        ids: list[int] = []
        try:
            async with http.post(self.url + "/v1/completions", json=body,
                                 headers={"X-Session-ID": session}) as r:
                data = await r.json(content_type=None)
                if r.status != 200:
                    out.problem = f"HTTP {r.status}: {str(data)[:160]}"
                else:
                    out.problem, ids = whole(data, want)
        except (aiohttp.ClientError, TimeoutError) as exc:
            out.problem = f"{type(exc).__name__}: {exc}"[:200]
        out.latency_s = round(time.monotonic() - sent, 3)
        self.answers[rid] += 1
        if out.problem is None and done + 1 < self.cfg.turns:
            self.idle.append((session, prompt + ids, done + 1))


def whole(data: Any, want: int) -> tuple[str | None, list[int]]:
    """What is wrong with a completion of forced length ``want`` (None: whole), its ids."""
    try:
        ch = data["choices"]
        if len(ch) != 1:
            return f"{len(ch)} choices", []
        c = ch[0]
        ids = list(c.get("token_ids") or [])
        if len(ids) != want or any(t != FILLER_TOKEN_ID for t in ids):
            return f"{len(ids)} token ids, {want} asked", ids
        if c["text"] != FILLER * want:
            return "text is not the tokens' text", ids
        if c["finish_reason"] != "length":
            return f"finish_reason {c['finish_reason']!r}", ids
        if data["usage"]["completion_tokens"] != want:
            return f"usage says {data['usage']['completion_tokens']} tokens", ids
    except (KeyError, TypeError, IndexError) as exc:
        return f"malformed answer: {exc!r}", []
    return None, ids


async def faults(cfg: SoakConfig, fleet: EmulatorFleet, t0: float, log: Faults,
                 log_dir: Path) -> None:
    """Kill replica 0, hang replica 1, restart replica 2 at their times."""
    at = cfg.fault_times()

    async def until(key: str) -> None:
        await asyncio.sleep(max(at[key] - (time.monotonic() - t0), 0.0))

    await until("kill")
    p = fleet.processes[0]
    log.note(t0, "SIGKILL", 0, p.pid)
    p.kill()
    await until("hang")
    p = fleet.processes[1]
    log.note(t0, "SIGSTOP", 1, p.pid)
    os.kill(p.pid, signal.SIGSTOP)
    await until("cont")
    log.note(t0, "SIGCONT", 1, p.pid)
    os.kill(p.pid, signal.SIGCONT)
    await until("restart")
    p = fleet.processes[2]
    log.note(t0, "SIGKILL (restart)", 2, p.pid)
    p.kill()
    await asyncio.sleep(cfg.restart_after_s)
    opts = {"profile": cfg.profile, "time_scale": cfg.time_scale, "seed": cfg.seed + 2,
            "port": p.port}
    path = log_dir / "emulator-2-restarted.log"
    proc = spawn(opts, path)
    url = await asyncio.to_thread(wait_ready, proc, path, 60.0)
    fleet.processes[2] = EmulatorProcess(proc, url, path)
    log.note(t0, "restarted", 2, proc.pid)


def phase_of(cfg: SoakConfig) -> Any:
    at = cfg.fault_times()

    def phase(t: float) -> str:
        if t < at["kill"]:
            return "steady"
        if t < at["hang"]:
            return "killed"
        if t < at["cont"]:
            return "hung"
        if t < at["restart"]:
            return "after_hang"
        return "restarted"
    return phase


async def metric_lines(http: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """The proxy's request and relocation counters from ``/metrics``."""
    async with http.get(url + "/metrics") as r:
        text = await r.text()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(("tailsieve_proxy_requests_total", "tailsieve_session_",
                            "tailsieve_replica_healthy")) and " " in line:
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                continue
    return out


async def soak(cfg: SoakConfig, log_dir: Path) -> dict[str, Any]:
    """Run the soak; its report."""
    fleet = EmulatorFleet.start(cfg.replicas, profile=cfg.profile, time_scale=cfg.time_scale,
                                log_dir=log_dir, seed=cfg.seed)
    proxy: subprocess.Popen[str] | None = None
    try:
        proxy, url = start_proxy(fleet.urls, log_dir / "proxy.log")
        timeout = aiohttp.ClientTimeout(total=cfg.client_timeout_s)
        async with aiohttp.ClientSession(timeout=timeout,
                                         connector=aiohttp.TCPConnector(limit=0)) as http:
            t0 = time.monotonic()
            log = Faults()
            load = Load(cfg, url, t0, phase_of(cfg))
            hurt = asyncio.create_task(faults(cfg, fleet, t0, log, log_dir))
            await load.run(http)
            await hurt
            wall = time.monotonic() - t0
            metrics = await metric_lines(http, url)
            async with http.get(url + "/health") as r:
                health = r.status
        return report(cfg, load, log, metrics, health, wall)
    finally:
        if proxy is not None:
            proxy.send_signal(signal.SIGTERM)
            try:
                proxy.wait(30)
            except subprocess.TimeoutExpired:
                proxy.kill()
        for p in fleet.processes:  # a replica left stopped would not take SIGTERM
            if p.alive():
                os.kill(p.pid, signal.SIGCONT)
        fleet.close()


def report(cfg: SoakConfig, load: Load, log: Faults, metrics: dict[str, float],
           health: int, wall: float) -> dict[str, Any]:
    outs = load.outcomes
    problems = Counter(o.problem.split(":")[0] for o in outs if o.problem is not None)
    dup = sum(1 for n in load.answers.values() if n > 1)
    lost = sum(1 for o in outs if load.answers[o.rid] == 0)
    phases: dict[str, Any] = {}
    for name in dict.fromkeys(o.phase for o in outs):
        lat = np.array([o.latency_s for o in outs if o.phase == name])
        phases[name] = {"requests": int(lat.size),
                        "latency_s_p50": round(float(np.percentile(lat, 50)), 3),
                        "latency_s_p99": round(float(np.percentile(lat, 99)), 3),
                        "latency_s_max": round(float(lat.max()), 3),
                        "stalled": int((lat > cfg.stall_s).sum())}
    bad = sum(1 for o in outs if o.problem is not None)
    return {
        "config": asdict(cfg), "wall_s": round(wall, 1), "requests": len(outs),
        "sessions": load.num_sessions, "answered_whole": len(outs) - bad, "failed": bad,
        "failures": dict(problems), "examples": [asdict(o) for o in outs if o.problem][:5],
        "duplicates": dup, "lost": lost,
        "latency_s_max": max((o.latency_s for o in outs), default=0.0),
        "stalled": sum(1 for o in outs if o.latency_s > cfg.stall_s),
        "phases": phases, "faults": log.log, "proxy_metrics": metrics,
        "health_at_end": health,
        "ok": bad == 0 and dup == 0 and lost == 0,
    }


def _stop(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = SoakConfig()
    for name, value in asdict(d).items():
        if name in ("profile",):
            p.add_argument("--profile", default=value)
            continue
        p.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    p.add_argument("--max-latency-s", type=float, default=None,
                   help="also fail when the slowest answer took longer")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    cfg = SoakConfig(**{k: getattr(a, k) for k in asdict(d)})
    log_dir = Path(tempfile.mkdtemp(prefix="tailsieve-soak-"))
    before = signal.signal(signal.SIGTERM, _stop)  # SIGTERM still stops what was started
    try:
        result = asyncio.run(soak(cfg, log_dir))
    finally:
        signal.signal(signal.SIGTERM, before)
    result["command"] = command_line("benchmarks/soak_proxy.py",
                                     sys.argv[1:] if argv is None else argv)
    result["logs"] = portable_path(log_dir)
    result["load_average_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
    if a.max_latency_s is not None and result["latency_s_max"] > a.max_latency_s:
        result["ok"] = False
        result["why_not_ok"] = f"slowest answer {result['latency_s_max']} s > {a.max_latency_s} s"
    out = a.out or default_out("soak_proxy.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("requests", "answered_whole", "failed",
                                             "duplicates", "lost", "latency_s_max", "stalled",
                                             "health_at_end", "ok")}))
    print(json.dumps(result["phases"]))
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    sys.exit(0 if main()["ok"] else 1)
