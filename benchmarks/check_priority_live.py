"""Live check that a server honours the per-request ``priority`` (vLLM's priority scheduling).

Start one server that runs one sequence at a time under the priority policy, e.g. (the tiny
model on the vLLM CPU build)::

    TAILSIEVE_VLLM_PORT=8141 TAILSIEVE_VLLM_LOG_DIR=/tmp/levers-vllm \\
    TAILSIEVE_VLLM_EXTRA='--scheduling-policy priority --max-num-seqs 1' \\
        bash scripts/start_vllm_servers.sh 1
    python benchmarks/check_priority_live.py --url http://127.0.0.1:8141 \\
        --out benchmarks/results/priority/vllm_cpu.json

It sends a long "blocker" request, then, while it runs, ``--requests`` short ones one after
another with priorities that do not follow their arrival (alternately high and low values).
With one running slot the server must finish the short ones in ``(priority, arrival)`` order;
under FCFS it would finish them in arrival order (and vLLM refuses a non-zero priority there).
The emulator (``tailsieve emulate --scheduling-policy priority``) answers the same way.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any


def _post(url: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return dict(json.loads(resp.read()))


def _model(url: str) -> str:
    with urllib.request.urlopen(url + "/v1/models", timeout=30) as resp:
        return str(json.loads(resp.read())["data"][0]["id"])


def priorities(n: int) -> list[int]:
    """Arrival order -> priority: alternately late-high and early-low values, so that the
    priority order differs from the arrival order (e.g. 4 -> [3, -3, 2, -2])."""
    out = []
    for i in range(n):
        k = n // 2 - i // 2
        out.append(k if i % 2 == 0 else -k)
    return out


def check(url: str, num_requests: int = 6, blocker_tokens: int = 400, short_tokens: int = 8,
          gap_s: float = 0.05, timeout_s: float = 600.0) -> dict[str, Any]:
    """Run the check against ``url``; returns what it saw and whether priority was honoured."""
    model = _model(url)
    prompt = "Count slowly from one to one thousand: one, two, three,"
    done: list[int] = []
    lock = threading.Lock()
    errors: list[str] = []

    def send(tag: int, prio: int, tokens: int) -> None:
        body = {"model": model, "prompt": prompt, "max_tokens": tokens, "ignore_eos": True,
                "temperature": 0.0, "priority": prio}
        try:
            _post(url, body, timeout_s)
        except Exception as exc:
            errors.append(f"request {tag}: {exc}")
            return
        with lock:
            done.append(tag)

    prios = priorities(num_requests)
    t0 = time.perf_counter()
    blocker = threading.Thread(target=send, args=(-1, 0, blocker_tokens))
    blocker.start()
    time.sleep(max(gap_s * 4, 0.2))  # the blocker is admitted first
    threads = []
    for i, p in enumerate(prios):
        th = threading.Thread(target=send, args=(i, p, short_tokens))
        th.start()
        threads.append(th)
        time.sleep(gap_s)
    for th in [blocker, *threads]:
        th.join()
    order = [i for i in done if i >= 0]
    want = sorted(range(num_requests), key=lambda i: (prios[i], i))
    return {"url": url, "model": model, "priorities_by_arrival": prios,
            "finish_order": order, "expected_order": want, "arrival_order":
            list(range(num_requests)), "blocker_first": bool(done) and done[0] == -1,
            "honoured": order == want and not errors, "errors": errors,
            "wall_s": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--requests", type=int, default=6)
    ap.add_argument("--blocker-tokens", type=int, default=400)
    ap.add_argument("--gap-s", type=float, default=0.05)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    res = check(args.url, args.requests, args.blocker_tokens, gap_s=args.gap_s)
    text = json.dumps(res, indent=1)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0 if res["honoured"] else 1


if __name__ == "__main__":
    sys.exit(main())
