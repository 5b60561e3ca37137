"""The replicas the real-engine benchmark runs on, and what it asks them directly."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

from tailsieve.runtime.emulator import EmulatorFleet
from tailsieve.runtime.engine.http_runner import HttpPieceRunner

ROOT = Path(__file__).resolve().parents[2]


def loadavg() -> str:
    """``/proc/loadavg`` (the machine is shared; recorded with every measurement)."""
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "n/a"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}  (loadavg {loadavg()})", file=sys.stderr,
          flush=True)


class Servers:
    """Endpoints to use: the given ones; else ``emulate`` emulated replicas (subprocesses on
    free loopback ports, the ``cpu`` profile at ``time_scale``); else two vLLM CPU servers
    started with the project's scripts. Whatever is started here is stopped on exit."""

    def __init__(self, endpoints: list[str], emulate: int = 0, time_scale: float = 1.0,
                 log_dir: Path | None = None) -> None:
        self.endpoints = list(endpoints)
        self.emulate = emulate
        self.time_scale = time_scale
        self.log_dir = log_dir
        self.kind = ("running servers (--endpoints)" if endpoints else "emulated" if emulate
                     else "vLLM CPU servers started here")
        self._fleet: EmulatorFleet | None = None
        self._started_vllm = False

    def __enter__(self) -> Servers:
        if self.endpoints:
            return self
        if self.emulate:
            log(f"starting {self.emulate} emulated replicas (cpu profile x {self.time_scale})")
            self._fleet = EmulatorFleet.start(self.emulate, profile="cpu",
                                              time_scale=self.time_scale, log_dir=self.log_dir)
            self.endpoints = self._fleet.urls
            return self
        log("starting 2 vLLM servers with scripts/start_vllm_servers.sh")
        out = subprocess.run(["bash", str(ROOT / "scripts" / "start_vllm_servers.sh"), "2"],
                             check=True, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        self._started_vllm = True
        self.endpoints = [u for u in out.stdout.strip().split(",") if u]
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fleet is not None:
            self._fleet.close()
        if self._started_vllm:
            log("stopping the servers (scripts/stop_vllm_servers.sh)")
            subprocess.run(["bash", str(ROOT / "scripts" / "stop_vllm_servers.sh")],
                           check=False, cwd=ROOT)


async def served_model(url: str) -> tuple[str, int]:
    """Served model id and ``max_model_len`` of a server (the engine client's model card)."""
    runner = HttpPieceRunner([url], health_timeout_s=30.0)
    try:
        card = await runner.models.card(0)
    finally:
        await runner.aclose()
    if card is None:
        raise RuntimeError(f"{url} lists no model")
    return card.name, card.max_model_len or 1024


async def prompt_tokens(url: str, model: str, texts: list[str]) -> dict[str, int] | None:
    """Prompt length in tokens of each text (``POST /tokenize``); None when the server has no
    tokenizer endpoint (the emulator)."""
    out: dict[str, int] = {}
    async with aiohttp.ClientSession() as s:
        for t in texts:
            async with s.post(url + "/tokenize", json={"model": model, "prompt": t}) as r:
                if r.status != 200:
                    return None
                out[t] = int((await r.json())["count"])
    return out


async def first_token_s(url: str, model: str, prompt: str, reps: int) -> float:
    """Median client-side latency of a 1-token request at b=1 (HTTP + queueing + prefill +
    first token): the per-request fixed cost the simulator charges as ``prefill_s``."""
    times: list[float] = []
    body = {"model": model, "prompt": prompt, "max_tokens": 1, "ignore_eos": True}
    async with aiohttp.ClientSession() as s:
        for _ in range(reps):
            t0 = time.perf_counter()
            async with s.post(url + "/v1/completions", json=body) as r:
                await r.read()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)
