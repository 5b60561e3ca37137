"""Connect to a Ray cluster within a deadline, or say in one line why not.

``ray.init`` on an address where no Ray GCS answers retries for minutes (Ray 2.60: 20
attempts of about 40 s each), and blocks inside Ray's C++ client, where neither a Python timeout
nor SIGTERM reaches it. It also does not always connect where it was told: it replaces a loopback
host (``127.0.0.1``, ``localhost``) with this node's address, so a head whose GCS listens on
loopback only passes a TCP check of ``--address`` and is then retried where nothing listens.

``connect_ray`` bounds the whole connection by ``timeout_s`` (default 30 s):

1. Ray's own resolution of the address (``auto`` through ``RAY_ADDRESS`` or the last
   ``ray start``; loopback to this node's address) names where Ray will connect;
2. that address must accept a TCP connection;
3. a child process runs the same ``ray.init`` and reads the cluster's resources; at the deadline
   it is SIGKILLed with its process group, so a failed connection leaves no Ray thread or
   process behind;
4. only then does this process call ``ray.init`` (the connection just succeeded).

Every failure is one ``ConfigError`` line: the address given, the one Ray tried, what answered
there, and what to set.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from tailsieve.errors import ConfigError
from tailsieve.runtime.cluster.preflight import CONNECT_TIMEOUT_S, split_host_port, tcp_reachable

DEFAULT_CONNECT_TIMEOUT_S = 30.0
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # =0: Ray keeps 127.0.0.1 (one machine)
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
FIX = (
    "set --address (or RAY_ADDRESS) to the head's GCS address HOST:PORT as `ray start --head` "
    "printed it, and run this on a node of that cluster"
)

_PROBE = """
import json, sys
import ray
ray.init(address=sys.argv[1], log_to_driver=False)
alive = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
print(json.dumps({"total": ray.cluster_resources(), "nodes": alive}))
sys.stdout.flush()
ray.shutdown()
"""


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """What the connection probe saw: the cluster's total resources
    (``ray.cluster_resources()``) and each alive node's resources."""

    total: dict[str, float]
    nodes: tuple[dict[str, float], ...]


def connect_ray(
    ray: Any, address: str, timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S, **kw: Any
) -> ClusterSnapshot | None:
    """``ray.init(address=address, **kw)`` once a bounded probe connected the same way, else a
    one-line ``ConfigError`` within ``timeout_s``. ``local`` starts a Ray instance here (no
    probe; returns None)."""
    if not timeout_s > 0:
        raise ConfigError(f"--connect-timeout must be > 0 s, got {timeout_s:g}")
    snapshot = None
    if address != "local":
        deadline = time.monotonic() + timeout_s
        target = ray_target(address)
        check_target(address, target, deadline)
        snapshot = probe_cluster(address, target, deadline, timeout_s)
    try:
        ray.init(address=address, **kw)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"cannot connect to Ray at {address!r}: {exc}") from None
    return snapshot


def ray_target(address: str) -> str:
    """The ``host:port`` that ``ray.init(address)`` connects to, by Ray's own resolution (the
    address itself when Ray cannot say, or for a ``ray://`` client address)."""
    if "://" in address:
        return address
    try:
        from ray._private.services import canonicalize_bootstrap_address

        return canonicalize_bootstrap_address(address) or address
    except ConnectionError as exc:  # auto, and no running cluster found
        raise ConfigError(f"cannot connect to Ray at {address!r}: {exc}") from None
    except Exception:
        return address


def check_target(address: str, target: str, deadline: float) -> None:
    """Raise ``ConfigError`` unless ``target`` (where Ray connects) accepts a TCP connection."""
    hp = split_host_port(target)
    if hp is None:
        return
    why = tcp_reachable(hp[0], hp[1], _left(deadline, CONNECT_TIMEOUT_S))
    if why is None:
        return
    given = split_host_port(address)
    given_open = (
        given is not None
        and given != hp
        and tcp_reachable(given[0], given[1], _left(deadline, CONNECT_TIMEOUT_S)) is None
    )
    raise ConfigError(unreachable_message(address, target, why, given_open))


def unreachable_message(address: str, target: str, why: str, given_open: bool) -> str:
    """The line for a Ray address whose resolved ``target`` refused TCP (``why``);
    ``given_open``: the address as given did accept a connection."""
    host, port = split_host_port(target) or (target, 0)
    given = split_host_port(address)
    if given_open and given is not None and given[0] in LOOPBACK_HOSTS:
        return (
            f"cannot connect to Ray at {address}: Ray replaces a loopback address with this "
            f"node's address and connects to {target}, which refused ({why}), while {address} "
            "accepts connections: the head's GCS listens on loopback only. Start the head on "
            f"this node's address (ray start --head --node-ip-address {host} --port {port}) and "
            f"pass --address {target} (or RAY_ADDRESS), or, for a cluster on this machine only, "
            f"set {LOOPBACK_ENV}=0 so that Ray keeps {given[0]}"
        )
    shown = address if target == address else f"{address} ({target})"
    return (
        f"cannot reach Ray at {shown}: TCP connect to {host}:{port} failed ({why}): is the head "
        f"running (ray start --head --port PORT)? Else {FIX}"
    )


def probe_cluster(
    address: str, target: str, deadline: float, timeout_s: float, tcp_open: bool = True
) -> ClusterSnapshot:
    """Run ``ray.init(address)`` in a child process until ``deadline``; its snapshot of the
    cluster, or ``ConfigError`` (the child, and its process group, killed at the deadline).
    ``tcp_open``: ``target`` was seen accepting TCP connections (the message says so)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _PROBE, address],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    timed_out = False
    try:
        out, err = proc.communicate(timeout=_left(deadline, timeout_s))
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        out, err = _drain(proc)
    except BaseException:
        _kill_group(proc)
        raise
    if proc.returncode == 0 and not timed_out:
        with contextlib.suppress(ValueError, KeyError, IndexError, TypeError):
            row = json.loads(out.strip().splitlines()[-1])
            return ClusterSnapshot(
                total={str(k): float(v) for k, v in row["total"].items()},
                nodes=tuple({str(k): float(v) for k, v in n.items()} for n in row["nodes"]),
            )
    line = probe_message(address, target, timeout_s, timed_out, ray_detail(err), tcp_open)
    raise ConfigError(line)


def probe_message(
    address: str,
    target: str,
    timeout_s: float,
    timed_out: bool,
    detail: str,
    tcp_open: bool = True,
) -> str:
    """The line for a Ray address where ``ray.init`` did not succeed (``timed_out``: within
    ``timeout_s``; ``detail``: Ray's last word; ``tcp_open``: ``target`` accepted TCP)."""
    where = address if target == address else f"{address} (Ray connects to {target})"
    if timed_out:
        said = f"; Ray's last message: {detail}" if detail else ""
        opened = f"{target} accepts TCP connections, but " if tcp_open else ""
        what = (
            f"{opened}Ray did not connect to {target} within {timeout_s:g} s (no Ray GCS "
            f"answered there, or this machine runs no node of that cluster{said})"
        )
        return f"cannot connect to Ray at {where}: {what}; {FIX}, or raise --connect-timeout"
    return f"cannot connect to Ray at {where}: {detail or 'the probe exited'}; {FIX}"


_RAY_LOG_PREFIX = re.compile(r"^(\[[^\]]*\]\s*[\w./-]+:\d+:\s*|\S+ \S+\s+[A-Z]+ [\w./-]+:\d+ -- )")
_RAY_INFO = re.compile(r"^(\[\S+ \S+ I |\S+ \S+\s+(INFO|DEBUG) )")


def ray_detail(stderr: str, limit: int = 200) -> str:
    """Ray's last warning or error line in ``stderr`` (its INFO lines skipped), without Ray's
    log prefix (``[time W pid tid] file:line:``); empty when there is none."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    lines = [ln for ln in lines if not _RAY_INFO.match(ln)]
    if not lines:
        return ""
    text = _RAY_LOG_PREFIX.sub("", lines[-1])
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _left(deadline: float, cap: float) -> float:
    return max(0.05, min(cap, deadline - time.monotonic()))


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


def _drain(proc: subprocess.Popen[str]) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=5.0)
    except subprocess.TimeoutExpired:
        proc.wait()
        return "", ""
