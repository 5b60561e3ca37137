"""The routers ``bench_routers_live.py`` puts in front of one fleet, each as its own process.

``tailsieve`` is ``tailsieve serve`` (this checkout's sources, the same interpreter, its
model-time timers scaled with the emulators: ``live_serve``);
``round-robin`` is ``tailsieve serve --policy turn-round-robin --no-moves`` (every request to
the next server, no session state); the others are the external routers installed by
``scripts/setup_routers.sh`` into their own venv: smg (the SGLang Model Gateway) and
vllm-router, each under its own policy, with its defaults otherwise. Every router binds
127.0.0.1 on a free port and is stopped by its PID when its run ends.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_VENV = REPO / ".venv-routers"
ROUTERS = ("tailsieve", "round-robin", "smg-cache_aware", "smg-consistent_hashing",
           "vllm-router-cache_aware", "vllm-router-sticky_least_loaded")
TAILSIEVE_VARIANTS = {  # ablations of ``tailsieve`` (named with --routers; not run by default)
    "tailsieve-no-moves": ("--no-moves",),  # placement only: each turn one piece, never moved
    "tailsieve-whole-pieces": ("--piece-tokens", "1000000"),  # moves on, a turn one piece
    "tailsieve-always-pieces": ("--piece-tokens", "512"),  # pieces even on a uniform fleet
    "tailsieve-tokenize": ("--tokenize-prompts",),  # text prompts to /tokenize first
}
DIAGNOSTIC = (*TAILSIEVE_VARIANTS, "smg-round_robin")  # smg-round_robin: the HTTP path of a
# Rust router against ``round-robin`` (the same choices through ``tailsieve serve``)
KNOWN = (*ROUTERS, *DIAGNOSTIC)
EXTERNAL = {"smg": "smg", "vllm-router": "vllm-router"}  # router family -> executable
SERVE = Path(__file__).resolve().parent / "live_serve.py"  # tailsieve serve, timers scaled


@dataclass(frozen=True, slots=True)
class RouterSpec:
    """One router: its name, family (tailsieve, smg, vllm-router) and policy."""

    name: str
    family: str
    policy: str

    @classmethod
    def parse(cls, name: str) -> RouterSpec:
        if name not in KNOWN:
            raise ValueError(f"unknown router {name!r}; known: {', '.join(KNOWN)}")
        if name == "tailsieve" or name in TAILSIEVE_VARIANTS:
            return cls(name, "tailsieve", "tailsieve")
        if name == "round-robin":
            return cls(name, "tailsieve", "turn-round-robin")
        family, _, policy = name.rpartition("-")
        return cls(name, family, policy)


def missing_reason(spec: RouterSpec, venv: Path) -> str | None:
    """Why ``spec`` cannot run here (None when it can)."""
    if spec.family == "tailsieve":
        return None
    exe = venv / "bin" / EXTERNAL[spec.family]
    if not exe.exists():
        return (f"{exe} is missing: run scripts/setup_routers.sh (installs the pins of "
                "constraints/routers.txt into their own venv)")
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def command(spec: RouterSpec, urls: list[str], port: int, venv: Path,
            fallback_profile: str, time_scale: float = 1.0) -> list[str]:
    """The command line that starts ``spec`` over ``urls`` on 127.0.0.1:``port``
    (``tailsieve serve``'s model-time timers scaled by ``time_scale``: ``live_serve``)."""
    if spec.family == "tailsieve":
        cmd = [sys.executable, str(SERVE), f"{time_scale:g}", "serve", "--endpoints",
               ",".join(urls),
               "--host", "127.0.0.1", "--port", str(port), "--policy", spec.policy]
        if spec.policy == "tailsieve":
            return [*cmd, "--profile", "auto", "--fallback-profile", fallback_profile,
                    *TAILSIEVE_VARIANTS.get(spec.name, ())]
        return [*cmd, "--no-moves", "--profile", fallback_profile]
    exe = str(venv / "bin" / EXTERNAL[spec.family])
    head = [exe, "launch"] if spec.family == "smg" else [exe]
    return [*head, "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *urls,
            "--policy", spec.policy, "--prometheus-host", "127.0.0.1",
            "--prometheus-port", str(free_port()), "--log-level", "warn"
            if spec.family == "smg" else "warning"]


class RouterProcess:
    """A started router (``with RouterProcess(...) as r: r.url``); stopped on exit."""

    def __init__(self, spec: RouterSpec, urls: list[str], venv: Path, fallback_profile: str,
                 log_path: Path, model: str, time_scale: float = 1.0,
                 ready_timeout_s: float = 120.0) -> None:
        self.spec, self.log_path, self.model = spec, log_path, model
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ)
        if spec.family == "tailsieve":  # this checkout's sources win
            src = str(REPO / "src")
            env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
        cmd = command(spec, urls, self.port, venv, fallback_profile, time_scale)
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        try:
            self._wait_ready(ready_timeout_s)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout_s: float) -> None:
        """Until a one-token completion goes through (every server registered and healthy)."""
        deadline = time.monotonic() + timeout_s
        body = (b'{"model": "%s", "prompt": "t1 t2 t3", "max_tokens": 1, "ignore_eos": true}'
                % self.model.encode())
        last = "no answer"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.spec.name} exited with {self.proc.returncode}: "
                                   f"{self.log_tail()}")
            req = urllib.request.Request(self.url + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    if r.status == 200:
                        return
                    last = f"HTTP {r.status}"
            except OSError as exc:
                last = str(exc)
            time.sleep(0.25)
        raise RuntimeError(f"{self.spec.name} not ready after {timeout_s:.0f} s ({last}): "
                           f"{self.log_tail()}")

    def log_tail(self, num_chars: int = 1500) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-num_chars:]

    def stop(self, timeout_s: float = 2.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s`` (smg holds its listener 5 s on SIGTERM)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                self.proc.wait(timeout_s)
        self._log.close()

    def __enter__(self) -> RouterProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
