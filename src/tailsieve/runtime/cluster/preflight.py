"""Checks ``launch --ray`` makes before any Ray call that could wait for minutes.

``ray.init`` on an address where nothing listens retries its GCS connection for minutes, and a
placement group whose bundles can never fit waits until its timeout. Both are refused here in
seconds, with one ``ConfigError`` line: the GCS port must accept a TCP connection
(``check_reachable``), and the bundles must fit the cluster's total resources, each bundle on
some node (``check_placement``). The placement check is pure (no Ray import): it is handed
``ray.cluster_resources()`` and the alive nodes' resources. An autoscaling cluster that would
grow to fit is refused too; start it larger or launch fewer replicas.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping, Sequence

from tailsieve.errors import ConfigError

CONNECT_TIMEOUT_S = 3.0


def split_host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``host:port``, ``[v6]:port`` or ``ray://host:port``; None when the
    address names no port (``auto``, ``local``, a bare host)."""
    addr = address.strip()
    if "://" in addr:
        addr = addr.split("://", 1)[1]
    addr = addr.rstrip("/")
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def tcp_reachable(host: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """None when a TCP connection to ``host:port`` succeeds within ``timeout_s``, else why not."""
    if not 0 < port < 65536:
        return f"port {port} is out of range"
    try:
        with socket.create_connection((host, port), timeout_s):
            return None
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    except OSError as exc:
        return exc.strerror or str(exc)


def check_reachable(
    address: str,
    resolve: Callable[[str], str | None] | None = None,
    timeout_s: float = CONNECT_TIMEOUT_S,
) -> None:
    """Raise ``ConfigError`` unless the Ray GCS at ``address`` accepts a TCP connection.

    ``local`` starts a Ray instance (nothing to check). ``auto`` is resolved with ``resolve``
    (Ray's own lookup: ``RAY_ADDRESS``, then the last ``ray start`` on this machine); an
    address that cannot be resolved or names no port is left to Ray."""
    if address == "local":
        return
    target = address
    if address == "auto" and resolve is not None:
        try:
            target = resolve(address) or ""
        except Exception:
            return
    hp = split_host_port(target)
    if hp is None:
        return
    why = tcp_reachable(hp[0], hp[1], timeout_s)
    if why is not None:
        shown = address if target == address else f"{address} ({target})"
        raise ConfigError(
            f"cannot reach Ray at {shown}: TCP connect to {hp[0]}:{hp[1]} failed ({why}); "
            "is the head running (ray start --head --port PORT) and the address right?"
        )


def check_placement(
    bundle: Mapping[str, float],
    count: int,
    total: Mapping[str, float],
    nodes: Sequence[Mapping[str, float]] = (),
) -> None:
    """Raise ``ConfigError`` when ``count`` bundles can never be placed: together they need
    more of a resource than the whole cluster has (``total``, i.e.
    ``ray.cluster_resources()``), or one bundle is larger than every node (``nodes``: each
    alive node's total resources; skipped when empty)."""
    short = [
        f"{key} {need * count:g} > {float(total.get(key, 0.0)):g}"
        for key, need in sorted(bundle.items())
        if need > 0 and need * count > float(total.get(key, 0.0)) + 1e-9
    ]
    if short:
        raise ConfigError(
            f"{count} replicas of {_fmt(bundle)} need more than the Ray cluster has "
            f"({'; '.join(short)}; cluster total {_fmt(total, bundle)}): launch fewer "
            "replicas, lower --cpus-per-replica/--gpus-per-replica, or add nodes"
        )
    if nodes and not any(_fits(bundle, n) for n in nodes):
        raise ConfigError(
            f"no Ray node can hold one replica's bundle {_fmt(bundle)}; largest nodes: "
            + ", ".join(_fmt(n, bundle) for n in list(nodes)[:4])
        )


def _fits(bundle: Mapping[str, float], node: Mapping[str, float]) -> bool:
    return all(need <= float(node.get(k, 0.0)) + 1e-9 for k, need in bundle.items() if need > 0)


def _fmt(res: Mapping[str, float], keys: Mapping[str, float] | None = None) -> str:
    names = sorted(keys) if keys is not None else sorted(res)
    return "{" + ", ".join(f"{k}: {float(res.get(k, 0.0)):g}" for k in names) + "}"
