"""The verl router's per-turn decision path alone: ``SessionBook`` events, its views and
``place_turn``, without an event loop or servers.

``--slots`` replica slots of which ``--pool`` are in service (the verl router keeps twice its
first pool by default), ``--sessions`` sessions running; each measured turn is one running
session's progress, another's end and its next turn requested, placed and started (seeded).
Reports CPU per turn (``time.process_time``) and a digest of every decision, so two versions
of the code can be compared for speed and for deciding the same.

    .venv/bin/python benchmarks/bench_book_views.py --out /tmp/book_views.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from outdir import command_line, default_out

from tailsieve.model.profiles import builtin_profile
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.session.book import SessionBook
from tailsieve.session.cache_model import PrefixCacheModel
from tailsieve.session.priced import place_turn
from tailsieve.session.settings import SessionSettings


def run(slots: int, pool: int, sessions: int, turns: int, seed: int) -> dict[str, Any]:
    """One run; its CPU per measured turn and the digest of all decisions."""
    cfg = ReplicaConfig.from_profile(builtin_profile("qwen3-4b-h100"),
                                     prefill_s_per_token="profile")
    book = SessionBook([cfg] * slots, PrefixCacheModel([cfg.kv_capacity_tokens] * slots))
    for r in range(pool, slots):
        book.set_healthy(r, False)
    rng, settings = random.Random(seed), SessionSettings()
    context: dict[int, int] = {}
    decisions: list[tuple[int, bool, str]] = []

    def turn(s: int, now_s: float) -> None:
        req = book.request(s, s // 8, context.get(s, 512) + 64)
        d = place_turn(req, book.views(now_s), settings, now_s, book.expected_turn_tokens)
        decisions.append((d.replica, d.moved, d.reason))
        book.start_turn(s, d.replica, now_s)

    now = 0.0
    for s in range(sessions):
        turn(s, now)
    t0 = time.process_time()
    for _ in range(turns):
        now += 0.001
        book.progress(rng.randrange(sessions), rng.randrange(1, 300), now)
        s, out = rng.randrange(sessions), rng.randrange(8, 2000)
        book.end_turn(s, out, now)
        context[s] = context.get(s, 512) + out
        turn(s, now)
    cpu = time.process_time() - t0
    return {"cpu_per_turn_ms": round(cpu / turns * 1e3, 4), "turns": turns,
            "decisions": len(decisions),
            "moves": sum(1 for d in decisions if d[1]),
            "decisions_sha1": hashlib.sha1(repr(decisions).encode()).hexdigest()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--slots", type=int, default=128)
    p.add_argument("--pool", type=int, default=64)
    p.add_argument("--sessions", type=int, default=4096)
    p.add_argument("--turns", type=int, default=8000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    if not 1 <= a.pool <= a.slots:
        p.error(f"--pool must be in [1, --slots={a.slots}], got {a.pool}")
    if a.sessions < 1 or a.turns < 1:
        p.error("--sessions and --turns must be >= 1")
    result = {"benchmark": "book_views",
              "command": command_line("benchmarks/bench_book_views.py",
                                      sys.argv[1:] if argv is None else argv),
              "slots": a.slots, "pool": a.pool, "sessions": a.sessions,
              **run(a.slots, a.pool, a.sessions, a.turns, a.seed)}
    out = a.out or default_out("book_views.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
