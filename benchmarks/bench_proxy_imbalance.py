"""Imbalance through the proxy: does ``tailsieve serve`` move turns where it should?

Three emulated vLLM replicas (subprocesses) behind ``RoutingProxy`` (the code ``tailsieve
serve`` runs, in this process); the client sends OpenAI completions with ``X-Session-ID``
keys, prompts as token ids and forced lengths, and each session's next turn carries its
previous context (prompt + output + a tool observation), as an agent does. Two scenarios:

``sticky``: twenty long sticky turns on one of three replicas. First ``--idle-sessions``
sessions per other replica run one short turn there and go quiet (the client never comes back
and, unless ``finish`` says so, never says so: the phantom load of the issue); then
``--sessions`` sessions start on replica 0 (replicas 1 and 2 out of service while they start,
as servers that join late); then ``--rounds`` rounds, each one long turn per session at once.
Modes: ``tailsieve`` (moves on; a tool wait counts as load for the horizon fitted from the
waits seen), ``finish`` (the same, and the client ends the quiet sessions with
``POST /finish_session``), ``pinned`` (moves on, but tool waits count for the 4 h session TTL,
as before the tool-wait horizon: the issue's 0 moves) and ``no-moves``.

``slow``: one replica slowed ``--slowdown`` times (the emulator's ``slowdown``); ``--sessions``
sessions placed by the proxy, ``--rounds`` rounds of long turns. Modes ``tailsieve`` and
``no-moves``. Moving turns off a slow replica needs per-replica speed in the load view.

The gateway's mid-turn checks run on the emulators' clock (``AGENTIC_BALANCE``'s interval,
horizon and seam times ``--time-scale``), so a scaled run checks as often per turn as a real
one. The figure is the rounds' total wall time, each mode over ``no-moves``::

    .venv/bin/python benchmarks/bench_proxy_imbalance.py \
        --out benchmarks/results/proxy/proxy_imbalance.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
from outdir import default_out

from tailsieve.model.profiles import load_profile
from tailsieve.runtime.emulator import EmulatorFleet
from tailsieve.runtime.proxy import ProxyConfig, RoutingProxy
from tailsieve.runtime.sessions import GatewayConfig, SessionGateway
from tailsieve.session.client_table import DEFAULT_TTL_S
from tailsieve.session.midturn import AGENTIC_BALANCE
from tailsieve.session.tool_wait import ToolWaitHorizon, ToolWaitSettings

MODEL = "tailsieve-emulated"
TOOL_TOKENS = 16
STICKY_MODES = ("tailsieve", "finish", "pinned", "no-moves")
SLOW_MODES = ("tailsieve", "no-moves")


class Client:
    """The sessions' contexts and the HTTP calls (one aiohttp session)."""

    def __init__(self, http: aiohttp.ClientSession, url: str, base: int) -> None:
        self.http, self.url = http, url
        self.contexts: dict[str, list[int]] = {}
        self._next = base  # token ids unique to this run (no cache hits across runs)

    def _fresh(self, n: int) -> list[int]:
        ids = list(range(self._next, self._next + n))
        self._next += n
        return ids

    async def turn(self, key: str, prompt_tokens: int, max_tokens: int) -> None:
        """One turn of ``key``: its context plus a tool observation (a new prompt for a new
        session), forced to ``max_tokens``."""
        ctx = self.contexts.get(key)
        prompt = (ctx + self._fresh(TOOL_TOKENS)) if ctx else self._fresh(prompt_tokens)
        body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
                "temperature": 1.0, "return_token_ids": True}
        async with self.http.post(self.url + "/v1/completions", json=body,
                                  headers={"X-Session-ID": key}) as r:
            text = await r.text()
            if r.status != 200:
                raise RuntimeError(f"{key}: HTTP {r.status}: {text[:200]}")
        got = json.loads(text)["choices"][0]["token_ids"]
        if len(got) != max_tokens:
            raise RuntimeError(f"{key}: {len(got)} tokens, asked {max_tokens}")
        self.contexts[key] = prompt + got

    async def finish(self, key: str) -> None:
        async with self.http.post(self.url + "/finish_session",
                                  params={"session_id": key}) as r:
            if r.status != 200:
                raise RuntimeError(f"finish_session {key}: HTTP {r.status}")


async def _rounds(client: Client, gw: SessionGateway, keys: list[str],
                  args: argparse.Namespace) -> dict[str, Any]:
    before = gw.stats()
    walls = []
    for _ in range(args.rounds):
        await asyncio.sleep(args.tool_s)
        t0 = time.perf_counter()
        await asyncio.gather(*(client.turn(k, 0, args.turn_tokens) for k in keys))
        walls.append(time.perf_counter() - t0)
    st = gw.stats()
    return {"round_wall_s": walls, "wall_s": sum(walls),
            "moves_at_boundary": st.moves_at_boundary - before.moves_at_boundary,
            "moves_mid_turn": st.moves_mid_turn - before.moves_mid_turn,
            "turns_per_replica_now": [r.num_running for r in st.replicas],
            "moves_off_reason": gw.moves_off_reason}


async def run_mode(scenario: str, mode: str, urls: list[str], profile: Path, base: int,
                   args: argparse.Namespace) -> dict[str, Any]:
    ts = args.time_scale  # the checks' clock runs at the emulators' pace
    balance = replace(AGENTIC_BALANCE, interval_s=AGENTIC_BALANCE.interval_s * ts,
                      horizon_s=AGENTIC_BALANCE.horizon_s * ts,
                      seam_s=AGENTIC_BALANCE.seam_s * ts)
    gcfg = GatewayConfig(profile=str(profile), piece_tokens=args.piece_tokens,
                         moves=mode != "no-moves", balance=balance)
    cfg = ProxyConfig(endpoints=tuple(urls), model=MODEL, gateway=gcfg)
    timeout = aiohttp.ClientTimeout(total=None)
    async with RoutingProxy(cfg) as proxy, aiohttp.ClientSession(timeout=timeout) as http:
        url = await proxy.start("127.0.0.1", 0)
        gw = proxy.gateway
        assert gw is not None
        if mode == "pinned":  # tool waits count until the session TTL, as before
            gw.book.tool_waits = ToolWaitHorizon(ToolWaitSettings(
                prior_s=DEFAULT_TTL_S, cap_s=DEFAULT_TTL_S, prior_weight=10**6, window=1))
        client = Client(http, url, base)
        keys = [f"s{k}" for k in range(args.sessions)]
        if scenario == "sticky":
            gw.set_healthy(0, False)
            idle = [f"idle{k}" for k in range(args.idle_sessions * (len(urls) - 1))]
            await asyncio.gather(*(client.turn(k, args.prompt_tokens, args.short_tokens)
                                   for k in idle))
            gw.set_healthy(0, True)
            if mode == "finish":
                await asyncio.gather(*(client.finish(k) for k in idle))
            for r in range(1, len(urls)):
                gw.set_healthy(r, False)
        await asyncio.gather(*(client.turn(k, args.prompt_tokens, args.short_tokens)
                               for k in keys))
        for r in range(len(urls)):
            gw.set_healthy(r, True)
        waits = [v.num_tool_waits for v in gw.book.views(gw.now())]
        row = await _rounds(client, gw, keys, args)
        row.update(scenario=scenario, mode=mode, tool_waits_before_rounds=waits,
                   tool_wait_horizon_s=gw.book.tool_waits.horizon_s)
    print(json.dumps(row), flush=True)
    return row


async def run(args: argparse.Namespace, profile: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    base = 1000
    for scenario in args.scenarios:
        overrides = [{"slowdown": args.slowdown}] if scenario == "slow" else []
        with EmulatorFleet.start(args.replicas, profile=args.profile,
                                 time_scale=args.time_scale, overrides=overrides,
                                 startup_timeout_s=180.0, max_model_len=65536,
                                 max_num_seqs=4096) as fleet:
            for mode in STICKY_MODES if scenario == "sticky" else SLOW_MODES:
                rows.append(await run_mode(scenario, mode, fleet.urls, profile, base, args))
                base += 1_000_000
    return rows


def summary(rows: list[dict[str, Any]], target: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for scenario in {r["scenario"] for r in rows}:
        by = {r["mode"]: r for r in rows if r["scenario"] == scenario}
        base = by["no-moves"]["wall_s"]
        out[scenario] = {m: {"wall_s": r["wall_s"], "speedup_vs_no_moves": base / r["wall_s"],
                             "moves_at_boundary": r["moves_at_boundary"],
                             "moves_mid_turn": r["moves_mid_turn"]} for m, r in by.items()}
        out[scenario]["pass"] = base / by["tailsieve"]["wall_s"] >= target
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", nargs="+", choices=("sticky", "slow"),
                    default=["sticky", "slow"])
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--idle-sessions", type=int, default=20,
                    help="quiet sessions per other replica (sticky)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--short-tokens", type=int, default=32, help="a first turn's output")
    ap.add_argument("--turn-tokens", type=int, default=2048, help="a long turn's output")
    ap.add_argument("--tool-s", type=float, default=0.5, help="tool wait before each round")
    ap.add_argument("--slowdown", type=float, default=5.0, help="the slow replica's (slow)")
    ap.add_argument("--piece-tokens", type=int, default=None)
    ap.add_argument("--time-scale", type=float, default=0.25)
    ap.add_argument("--profile", default="qwen3-4b-h100")
    ap.add_argument("--target", type=float, default=1.2, help="min speed-up over no-moves")
    ap.add_argument("--out", type=Path, default=default_out("proxy/proxy_imbalance.json"),
                    help="result JSON (default: under the system temp dir)")
    args = ap.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    profile = args.out.with_suffix(".profile.json")
    load_profile(args.profile).scaled(args.time_scale).save(profile)
    try:
        rows = asyncio.run(run(args, profile))
    finally:
        profile.unlink(missing_ok=True)
    result = {
        "benchmark": "proxy_imbalance", "replicas": args.replicas, "sessions": args.sessions,
        "idle_sessions": args.idle_sessions, "rounds": args.rounds,
        "turn_tokens": args.turn_tokens, "slowdown": args.slowdown,
        "time_scale": args.time_scale, "profile": args.profile, "target": args.target,
        "summary": summary(rows, args.target), "runs": rows,
        "loadavg": os.getloadavg(), "cpus": os.cpu_count(),
        "command": "benchmarks/bench_proxy_imbalance.py " + " ".join(
            argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
