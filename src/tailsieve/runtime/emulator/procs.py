"""Start emulators as subprocesses on free ports and stop them by PID.

Each child runs ``python -m tailsieve.runtime.emulator --port 0 ...`` and announces its URL on
stdout; stderr goes to a log file. ``EmulatorFleet`` is a context manager::

    with EmulatorFleet.start(4, profile="cpu", time_scale=0.01,
                             overrides=[{"slowdown": 3.0}]) as fleet:
        fleet.urls  # ['http://127.0.0.1:PORT', ...]
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tailsieve.errors import ReplicaError
from tailsieve.runtime.emulator.runner import READY_PREFIX

Options = Mapping[str, object]


@dataclass(slots=True)
class EmulatorProcess:
    """One emulator child process."""

    proc: subprocess.Popen[bytes]
    url: str  # base URL, http://127.0.0.1:PORT
    log_path: Path  # the child's stderr
    _terminated: bool = False  # SIGTERM sent (a second one would hit the default handler)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL now (a hard crash)."""
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
        self.proc.wait()

    def terminate(self) -> None:
        """Send SIGTERM once (the child shuts down cleanly and exits 0)."""
        if self.alive() and not self._terminated:
            os.kill(self.pid, signal.SIGTERM)
            self._terminated = True

    def stop(self, timeout_s: float = 5.0) -> int | None:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL; returns the exit status."""
        if self.alive():
            self.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode


def _flags(options: Options) -> list[str]:
    out: list[str] = []
    aliases = {"crash_after_s": "crash_after", "length_median_tokens": "length_median"}
    for key, value in options.items():
        if value is None:
            continue
        out += [f"--{aliases.get(key, key).replace('_', '-')}", str(value)]
    return out


def spawn(options: Options, log_path: Path) -> subprocess.Popen[bytes]:
    """Launch one child (not yet ready) with ``--port 0`` and the given options."""
    cmd = [sys.executable, "-m", "tailsieve.runtime.emulator", "--port", "0", *_flags(options)]
    with open(log_path, "wb") as log:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL)


def wait_ready(proc: subprocess.Popen[bytes], log_path: Path, timeout_s: float) -> str:
    """Read the child's ready line; returns its URL or raises ``ReplicaError``."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    buf = b""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                break
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
    line = buf.decode(errors="replace").split("\n", 1)[0].strip()
    if line.startswith(READY_PREFIX):
        return line[len(READY_PREFIX) :]
    tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
    raise ReplicaError(
        f"emulator pid {proc.pid} did not start within {timeout_s:g} s"
        + (f": {' | '.join(tail)}" if tail else "")
    )


class EmulatorFleet:
    """N emulator subprocesses; ``close()`` stops them all by PID."""

    def __init__(self, processes: list[EmulatorProcess], log_dir: Path) -> None:
        self.processes = processes
        self.log_dir = log_dir

    @property
    def urls(self) -> list[str]:
        return [p.url for p in self.processes]

    @classmethod
    def start(
        cls,
        n: int,
        profile: str = "cpu",
        time_scale: float = 1.0,
        overrides: Sequence[Options] = (),
        startup_timeout_s: float = 180.0,
        log_dir: str | Path | None = None,
        **options: object,
    ) -> EmulatorFleet:
        """Start ``n`` emulators. ``options`` apply to all (keys are CLI flag names with
        underscores: ``max_num_seqs``, ``error_rate``, ``crash_after``, ``crash_mode``,
        ``slowdown``, ``seed``, ...); ``overrides[i]`` adds to/replaces them for replica i.
        Replica i gets ``seed + i`` unless a seed is overridden."""
        if n < 1:
            raise ReplicaError(f"need at least one emulator, got {n}")
        logs = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="tailsieve-emu-"))
        logs.mkdir(parents=True, exist_ok=True)
        base_seed = int(options.pop("seed", 0))  # type: ignore[call-overload]
        launched: list[tuple[subprocess.Popen[bytes], Path]] = []
        fleet = cls([], logs)
        try:
            for i in range(n):
                opts: dict[str, object] = {
                    "profile": profile,
                    "time_scale": time_scale,
                    "seed": base_seed + i,
                    **options,
                }
                if i < len(overrides):
                    opts.update(overrides[i])
                log_path = logs / f"emulator-{i}.log"
                launched.append((spawn(opts, log_path), log_path))
            for proc, log_path in launched:
                url = wait_ready(proc, log_path, startup_timeout_s)
                fleet.processes.append(EmulatorProcess(proc, url, log_path))
        except BaseException:
            for proc, log_path in launched:
                if not any(p.proc is proc for p in fleet.processes):
                    fleet.processes.append(EmulatorProcess(proc, "", log_path))
            fleet.close()
            raise
        return fleet

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop every child (SIGTERM, then SIGKILL after ``timeout_s``)."""
        for p in self.processes:
            with contextlib.suppress(ProcessLookupError):
                p.terminate()
        for p in self.processes:
            with contextlib.suppress(ProcessLookupError):
                p.stop(timeout_s)

    def __enter__(self) -> EmulatorFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
