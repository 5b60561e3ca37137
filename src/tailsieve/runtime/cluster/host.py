"""The body of a server actor: one per replica, on the node Ray placed it.

``ServerHost.__init__`` starts the server as a subprocess (its own session, so its process group
holds the engine's children too) bound to the node's address, and waits for ``/health``. A
watcher thread ends the actor process when the server exits, so Ray restarts the actor
(``max_restarts``), which starts a fresh server at the next free port of its spec. The server
also gets ``PR_SET_PDEATHSIG`` (SIGTERM, so vLLM still stops its engine processes): it does not
outlive a killed actor. No Ray import here: the fleet wraps the class with ``ray.remote``; node
address and restart flag are passed in.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tailsieve.errors import ReplicaError
from tailsieve.runtime.cluster.spec import ServerSpec
from tailsieve.runtime.launcher import log_tail, stop_pids

_PR_SET_PDEATHSIG = 1
SERVER_EXIT_CODE = 75  # the actor's exit status when its server died (Ray then restarts it)


def _session_and_deathsig() -> None:  # runs in the child between fork and exec
    os.setsid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def healthy(url: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=timeout_s) as r:
            return int(r.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def stop_group(pid: int, grace_s: float = 15.0) -> None:
    """SIGTERM the process group of ``pid``, SIGKILL it after ``grace_s``."""
    stop_pids([pid], grace_s)


class ServerHost:
    """Starts one replica server and reports its address; ends its own process if it dies."""

    def __init__(self, spec: ServerSpec, node_ip: str, node_id: str, restarted: bool) -> None:
        self.spec = spec
        self.node_ip = node_ip
        self.node_id = node_id
        self.restarted = restarted
        self._stopping = False
        workdir = Path(spec.log_dir) / f"replica-{spec.index}"
        workdir.mkdir(parents=True, exist_ok=True)
        for name, text in spec.files.items():
            (workdir / name).write_text(text)
        candidates = spec.ports[1:] if restarted else spec.ports[:1]
        free = [p for p in candidates if port_free(node_ip, p)]
        if not free:
            raise ReplicaError(f"replica {spec.index}: no free port among {candidates}")
        self.port = free[0]
        self.url = f"http://{node_ip}:{self.port}"
        argv, env = spec.command(node_ip, self.port, str(workdir))
        self.log_file = str(workdir / f"server-{self.port}.log")
        with open(self.log_file, "ab") as fh:
            self.proc = subprocess.Popen(
                argv,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **env},
                preexec_fn=_session_and_deathsig,
            )
        self._wait_healthy()
        self.started_at = time.time()
        threading.Thread(target=self._watch, name="server-watch", daemon=True).start()

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.spec.health_timeout_s
        while not healthy(self.url):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                why = (
                    f"exited with {self.proc.returncode}"
                    if self.proc.poll() is not None
                    else f"not healthy after {self.spec.health_timeout_s:.0f} s"
                )
                stop_group(self.proc.pid, 2.0)
                raise ReplicaError(
                    f"replica {self.spec.index} ({self.spec.engine}, {self.url}) {why}; "
                    f"log {self.log_file}:\n{log_tail(self.log_file, 20)}"
                )
            time.sleep(0.25)

    def _watch(self) -> None:
        self.proc.wait()
        if not self._stopping:
            stop_group(self.proc.pid, 2.0)  # the engine's children, if any survived
            os._exit(SERVER_EXIT_CODE)  # Ray restarts this actor: a fresh server

    def info(self) -> dict[str, Any]:
        """Where the server is and what it is (one row of the state file)."""
        s = self.spec
        return {
            "index": s.index,
            "engine": s.engine,
            "pool": s.pool,
            "spec": s.spec,
            "status": "alive",
            "endpoint": self.url,
            "host": self.node_ip,
            "port": self.port,
            "pid": self.proc.pid,
            "node_id": self.node_id,
            "restarted": self.restarted,
            "log_file": self.log_file,
            "started_at": self.started_at,
        }

    def stop(self) -> int:
        """Stop the server's process group (no restart follows); returns its PID."""
        self._stopping = True
        stop_group(self.proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        return self.proc.pid
