"""Run one emulator as a foreground process until SIGTERM/SIGINT.

Shared by ``tailsieve emulate`` and ``python -m tailsieve.runtime.emulator`` (which the
subprocess helper uses). Once listening it prints exactly one line on stdout:
``tailsieve-emulator listening on http://HOST:PORT`` (``READY_PREFIX`` + URL).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

from tailsieve.errors import TailSieveError
from tailsieve.runtime.emulator.config import CRASH_MODES, SCHEDULING_POLICIES, EmulatorConfig
from tailsieve.runtime.emulator.server import EmulatorServer

READY_PREFIX = "tailsieve-emulator listening on "


async def serve(config: EmulatorConfig, host: str = "127.0.0.1", port: int = 0) -> None:
    """Serve until SIGTERM or SIGINT, then shut down cleanly."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    async with EmulatorServer(config, host, port) as server:
        print(f"{READY_PREFIX}{server.url}", flush=True)
        await stop.wait()


def serve_forever(config: EmulatorConfig, host: str = "127.0.0.1", port: int = 0) -> None:
    asyncio.run(serve(config, host, port))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tailsieve.runtime.emulator",
        description="Emulated vLLM replica (see tailsieve emulate).",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--profile", default="cpu")
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--max-num-seqs", type=int, default=None)  # default: the profile's, or 256
    p.add_argument("--kv-capacity", type=int, default=None)  # default: the profile's; 0 = off
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--prefill-s", type=float, default=0.0)
    p.add_argument("--crash-after", type=float, default=None)
    p.add_argument("--crash-mode", choices=CRASH_MODES, default="exit")
    p.add_argument("--error-rate", type=float, default=0.0)
    p.add_argument("--slowdown", type=float, default=1.0)
    p.add_argument("--scheduling-policy", choices=SCHEDULING_POLICIES, default="fcfs")
    p.add_argument("--model-name", default="tailsieve-emulated")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--length-median", type=float, default=256.0)
    p.add_argument("--length-sigma", type=float, default=1.0)
    return p


def capacity_options(max_num_seqs: int | None, kv_capacity: int | None) -> dict[str, object]:
    """``EmulatorConfig.from_profile`` keywords for the CLI flags: an absent flag keeps the
    profile's value (``--max-num-seqs`` falls back to 256), ``--kv-capacity 0`` switches the
    capacity off."""
    out: dict[str, object] = {}
    if max_num_seqs is not None:
        out["max_num_seqs"] = max_num_seqs
    if kv_capacity is not None:
        if kv_capacity < 0:
            raise TailSieveError(f"--kv-capacity must be >= 0 (0 = off), got {kv_capacity}")
        out["kv_capacity_tokens"] = kv_capacity or None
    return out


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = EmulatorConfig.from_profile(
            args.profile,
            **capacity_options(args.max_num_seqs, args.kv_capacity),
            model_name=args.model_name,
            time_scale=args.time_scale,
            max_model_len=args.max_model_len,
            prefill_s=args.prefill_s,
            crash_after_s=args.crash_after,
            crash_mode=args.crash_mode,
            error_rate=args.error_rate,
            slowdown=args.slowdown,
            scheduling_policy=args.scheduling_policy,
            seed=args.seed,
            length_median_tokens=args.length_median,
            length_sigma=args.length_sigma,
        )
        if not 0 <= args.port <= 65535:
            raise TailSieveError(f"port must be in 0..65535, got {args.port}")
        serve_forever(config, args.host, args.port)
    except TailSieveError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. port in use
        print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
        return 2
    return 0
