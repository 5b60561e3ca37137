"""Streaming through the proxy: time to the first token and the number of content chunks, for
the same streamed requests sent straight to the replicas and through ``tailsieve serve``
(``RoutingProxy``, the code the CLI runs), with moves on and with ``--no-moves``.

Emulated vLLM replicas run in subprocesses; the proxies run in this process, one at a time;
the clients run in another process and read every request's server-sent events: the time
from sending the request to its first chunk with text (``ttft_s``), the chunks with text
(``num_chunks``), the whole time, and that the streamed token ids and finish reasons join into
one whole answer (every token once, one finish). Requests alternate ``/v1/completions`` (token
ids) and ``/v1/chat/completions`` (messages: the proxy tokenizes them at a server first), each
forced to ``--max-tokens`` tokens (``ignore_eos``); direct requests go to replica ``k mod R``.
``--concurrency`` requests run at once (1: one at a time, the latency figure); ``--slowdown``
makes replica 0 that many times slower (an imbalance the proxy moves streamed turns off).

Targets (issue 40): the proxy's median first-token time within ``3 x`` direct or ``+0.3 s``,
and its median chunk count within ``2 x`` of direct (either way)::

    python benchmarks/bench_proxy_stream.py --out benchmarks/results/proxy/proxy_stream.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from outdir import command_line, default_out

from tailsieve.model.profiles import load_profile
from tailsieve.runtime.emulator import EmulatorFleet
from tailsieve.runtime.proxy import ProxyConfig, RoutingProxy
from tailsieve.runtime.sessions import GatewayConfig

MODEL = "tailsieve-emulated"
PROMPT_TOKENS = 64
TTFT_FACTOR, TTFT_SLACK_S, CHUNK_FACTOR = 3.0, 0.3, 2.0

Request = tuple[str, str, list[int], int]  # api ("completions" | "chat"), key, prompt, tokens


def _client(conn: Any) -> None:
    """Child process: runs each batch it is sent and answers one row per request."""
    import aiohttp

    async def one(s: Any, url: str, req: Request, interval: int | None) -> dict[str, Any]:
        api, key, ids, n = req
        body: dict[str, Any] = {"model": MODEL, "max_tokens": n, "ignore_eos": True,
                                "stream": True, "return_token_ids": True}
        if interval is not None:
            body["stream_interval"] = interval
        if api == "chat":
            body["messages"] = [{"role": "user", "content": " ".join(map(str, ids))}]
        else:
            body["prompt"] = ids
        path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
        t0 = time.perf_counter()
        first = None
        chunks = tokens = finishes = 0
        async with s.post(url + path, json=body, headers={"X-Session-ID": key}) as r:
            if r.status != 200:
                return {"error": f"HTTP {r.status}: {(await r.text())[:200]}"}
            async for line in r.content:
                if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                for ch in ev.get("choices") or ():
                    text = (ch.get("delta") or {}).get("content") if api == "chat" \
                        else ch.get("text")
                    if text:
                        chunks += 1
                        first = first if first is not None else time.perf_counter() - t0
                    tokens += len(ch.get("token_ids") or ())
                    finishes += bool(ch.get("finish_reason"))
        total = time.perf_counter() - t0
        bad = "" if tokens == n and finishes == 1 else f"{tokens} tokens / {finishes} finishes"
        return {"api": api, "ttft_s": first, "num_chunks": chunks, "total_s": total,
                "tokens": tokens, "error": bad}

    async def batch(urls: list[str], reqs: list[Request], concurrency: int,
                    interval: int | None) -> list[dict[str, Any]]:
        conn_ = aiohttp.TCPConnector(limit=0, force_close=True)
        async with aiohttp.ClientSession(connector=conn_,
                                         timeout=aiohttp.ClientTimeout(total=None)) as s:
            out: list[dict[str, Any]] = []
            for a in range(0, len(reqs), concurrency):
                out += await asyncio.gather(*(
                    one(s, urls[k % len(urls)], reqs[k], interval)
                    for k in range(a, min(a + concurrency, len(reqs)))))
            return out

    while True:
        msg = conn.recv()
        if msg is None:
            return
        conn.send(asyncio.run(batch(*msg)))


async def _ask(conn: Any, proc: Any, msg: Any) -> Any:
    conn.send(msg)
    while not await asyncio.to_thread(conn.poll, 1.0):
        if not proc.is_alive():
            raise RuntimeError(f"the client process died (exit code {proc.exitcode})")
    return conn.recv()


def requests(args: argparse.Namespace, tag: str) -> list[Request]:
    out = []
    for k in range(args.requests):
        base = 1000 + 97 * k
        api = "chat" if k % 2 else "completions"
        out.append((api, f"{tag}-{k}", list(range(base, base + PROMPT_TOKENS)), args.max_tokens))
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ttft = [r["ttft_s"] for r in rows]
    q = statistics.quantiles(ttft, n=10) if len(ttft) > 1 else ttft * 9
    return {"ttft_p50_s": statistics.median(ttft), "ttft_p90_s": q[8], "ttft_max_s": max(ttft),
            "chunks_p50": statistics.median(r["num_chunks"] for r in rows),
            "total_p50_s": statistics.median(r["total_s"] for r in rows)}


async def run(args: argparse.Namespace, urls: list[str], profile: Path) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_client, args=(child,), daemon=True)
    proc.start()
    modes: dict[str, Any] = {}
    try:
        for mode in ("direct", "proxy", "proxy_no_moves"):
            if mode == "direct":
                rows = await _ask(parent, proc, (urls, requests(args, mode), args.concurrency,
                                                 args.stream_interval))
                stats: dict[str, Any] = {}
            else:
                gw = GatewayConfig(profile=str(profile), moves=mode == "proxy")
                cfg = ProxyConfig(endpoints=tuple(urls), model=MODEL, gateway=gw)
                async with RoutingProxy(cfg) as proxy:
                    url = await proxy.start("127.0.0.1", 0)
                    cpu0 = time.process_time()
                    rows = await _ask(parent, proc, ([url], requests(args, mode),
                                                     args.concurrency, args.stream_interval))
                    cpu = time.process_time() - cpu0
                    assert proxy.gateway is not None
                    st = proxy.gateway.stats()
                    chunks = sum(r["num_chunks"] for r in rows)
                    stats = {"num_pieces": st.num_pieces, "moves_mid_turn": st.moves_mid_turn,
                             "turns_per_replica": [r.num_turns for r in st.replicas],
                             "proxy_cpu_s": cpu, "proxy_cpu_us_per_chunk": 1e6 * cpu / chunks}
            bad = [r["error"] for r in rows if r["error"]]
            if bad:
                raise RuntimeError(f"{mode}: {bad[:3]}")
            modes[mode] = {**summary(rows), **stats, "requests": rows}
            print(mode, json.dumps({k: v for k, v in modes[mode].items() if k != "requests"}),
                  flush=True)
    finally:
        if proc.is_alive():
            parent.send(None)
        proc.join(30)
    return modes


def verdict(modes: dict[str, Any]) -> dict[str, Any]:
    d = modes["direct"]
    out: dict[str, Any] = {}
    ok = True
    for mode in ("proxy", "proxy_no_moves"):
        m = modes[mode]
        bound = max(TTFT_FACTOR * d["ttft_p50_s"], d["ttft_p50_s"] + TTFT_SLACK_S)
        ratio = m["chunks_p50"] / d["chunks_p50"] if d["chunks_p50"] else float("inf")
        passed = m["ttft_p50_s"] <= bound and 1 / CHUNK_FACTOR <= ratio <= CHUNK_FACTOR
        out[mode] = {"ttft_ratio_vs_direct": m["ttft_p50_s"] / d["ttft_p50_s"],
                     "ttft_added_s": m["ttft_p50_s"] - d["ttft_p50_s"],
                     "ttft_bound_s": bound, "chunk_ratio_vs_direct": ratio, "pass": passed}
        ok = ok and passed
    out["pass"] = ok
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--requests", type=int, default=12, help="per mode")
    ap.add_argument("--concurrency", type=int, default=1, help="requests at once")
    ap.add_argument("--max-tokens", type=int, default=1500)
    ap.add_argument("--stream-interval", type=int, default=None,
                    help="vLLM's per-request stream_interval (default: every token)")
    ap.add_argument("--slowdown", type=float, default=1.0, help="replica 0 is this much slower")
    ap.add_argument("--time-scale", type=float, default=0.1)
    ap.add_argument("--profile", default="qwen3-4b-h100")
    ap.add_argument("--out", type=Path, default=default_out("proxy/proxy_stream.json"),
                    help="result JSON (default: under the system temp dir)")
    args = ap.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    profile = args.out.with_suffix(".profile.json")  # the replicas' speed, for the proxy
    load_profile(args.profile).scaled(args.time_scale).save(profile)
    try:
        with EmulatorFleet.start(args.replicas, profile=args.profile,
                                 time_scale=args.time_scale, startup_timeout_s=180.0,
                                 max_model_len=65536,
                                 overrides=[{"slowdown": args.slowdown}]) as fleet:
            modes = asyncio.run(run(args, fleet.urls, profile))
    finally:
        profile.unlink(missing_ok=True)
    result = {
        "benchmark": "proxy_stream",
        "replicas": args.replicas, "requests": args.requests,
        "concurrency": args.concurrency, "max_tokens": args.max_tokens,
        "slowdown": args.slowdown,
        "stream_interval": args.stream_interval, "time_scale": args.time_scale,
        "profile": args.profile, "modes": modes, "targets": verdict(modes),
        "loadavg": os.getloadavg(), "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "command": command_line("benchmarks/bench_proxy_stream.py",
                                argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["targets"], indent=1))


if __name__ == "__main__":
    main()
