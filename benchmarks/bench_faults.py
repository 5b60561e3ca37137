"""Tokens regenerated when one replica of five dies mid-step: restarted responses vs continuation.

5 emulated replicas (in-process ``EmulatorServer``s, one asyncio loop), one step of ``--groups``
groups x ``--group-size`` responses dealt spread (response ``i`` of group ``g`` on replica
``(g * group_size + i) % 5``, as spread dealing places them), forced lengths from a seeded
lognormal (replay mode, so every variant generates the same responses), token-id prompts. At
the moment the replica holding the longest response has generated ``--kill-at`` of its assigned
tokens, it crashes (connections dropped, port closed).

Regenerated tokens = tokens the replicas generated that were not delivered (every server's
finished + aborted + running tokens; the dead one's counted at its death) minus the delivered
tokens. Variants:

- ``restart``: without continuation, one piece per response (a dead replica's responses start
  again elsewhere from their prompts; the group's other responses are kept);
- ``continue-pieces``: continuation with ``--piece-tokens`` pieces (they continue from their
  last seam);
- ``continue-stream``: continuation with streaming (from their last streamed token).

    PYTHONPATH=src .venv/bin/python benchmarks/bench_faults.py --out benchmarks/results/faults.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from outdir import default_out

from tailsieve.core.plan import GroupAssignment, StepPlan
from tailsieve.core.pool import Pool
from tailsieve.runtime.emulator import EmulatorServer
from tailsieve.runtime.emulator.config import EmulatorConfig
from tailsieve.runtime.engine.backends import PromptInput, SamplingParams
from tailsieve.runtime.engine.lean_http import LeanTransport
from tailsieve.runtime.step.executor import LiveExecutor
from tailsieve.runtime.step.executor_config import ExecutorConfig

R = 5


def spread_plan(groups: int, gs: int) -> StepPlan:
    ids = [f"g{i}" for i in range(groups)]
    orders = [0] * R
    out = []
    for g, pid in enumerate(ids):
        reps = tuple((g * gs + i) % R for i in range(gs))
        out.append(GroupAssignment(pid, Pool.BULK, reps[0], False, orders[reps[0]], reps))
        orders[reps[0]] += 1
    return StepPlan(
        step=0,
        num_replicas=R,
        group_size=gs,
        num_required=groups,
        q=0,
        m=0,
        num_extra=0,
        tail_replicas=(),
        bulk_replicas=tuple(range(R)),
        assignments=tuple(out),
        num_fresh_to_deliver=groups,
        fresh_prompt_ids=tuple(ids),
        is_warmup=True,
        is_flush=False,
    )


def generated(srv: EmulatorServer) -> int:
    srv.driver.sync()
    return srv.driver.stats.finished_tokens + srv.driver.running_tokens()


async def one(args: argparse.Namespace, variant: str, kill_at: float | None) -> dict[str, Any]:
    rng = np.random.default_rng(args.seed)
    lengths = {
        (f"g{g}", i): int(min(max(rng.lognormal(np.log(args.median), 0.8), 8), 4 * args.median))
        for g in range(args.groups)
        for i in range(args.group_size)
    }
    prompts = {
        f"g{g}": PromptInput(
            f"g{g}", token_ids=tuple(int(t) for t in rng.integers(100, 30000, 100))
        )
        for g in range(args.groups)
    }
    cfg = EmulatorConfig.from_profile(args.profile, time_scale=args.time_scale)
    servers = [EmulatorServer(cfg) for _ in range(R)]
    for s in servers:
        await s.start()
    ex_cfg = ExecutorConfig(
        model=cfg.model_name,
        sampling=SamplingParams(max_tokens=100_000, temperature=1.0),
        continuation=variant != "restart",
        piece_tokens=args.piece_tokens if variant == "continue-pieces" else None,
        stream=variant == "continue-stream",
        probe_interval_s=60.0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = LiveExecutor(
            [s.url for s in servers],
            ex_cfg,
            transport=LeanTransport(),
            forced_length=lambda p, i: lengths[(p, i)],
        )
    dead_tokens: list[int] = []
    longest = max(lengths, key=lambda k: lengths[k])
    victim = (int(longest[0][1:]) * args.group_size + longest[1]) % R  # holds the longest

    victim_tokens = sum(
        n for (p, i), n in lengths.items() if (int(p[1:]) * args.group_size + i) % R == victim
    )

    async def killer() -> None:  # when the victim has done ``kill_at`` of its work
        assert kill_at is not None
        while generated(servers[victim]) < kill_at * victim_tokens:
            await asyncio.sleep(0.005)
        dead_tokens.append(generated(servers[victim]))
        await servers[victim].crash()

    kt = asyncio.create_task(killer()) if kill_at is not None else None
    t0 = time.perf_counter()
    res = await ex.run(spread_plan(args.groups, args.group_size), prompts)
    wall = time.perf_counter() - t0
    if kt is not None:
        await kt
    await ex.aclose()
    total = sum(
        dead_tokens[0] if dead_tokens and k == victim else generated(s)
        for k, s in enumerate(servers)
    )
    for s in servers:
        await s.aclose()
    delivered = sum(r.num_tokens for g in res.groups.values() for r in g.responses)
    assert delivered == sum(lengths.values()), "a delivered response is not its forced length"
    return {
        "variant": variant,
        "killed": kill_at is not None,
        "step_s": wall,
        "delivered_tokens": delivered,
        "regenerated_tokens": total - delivered,
        "groups_regenerated": res.outcome.num_regenerated,
        "relocations": ex.num_relocations,
    }


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = [await one(args, "restart", None)]
    for v in ("restart", "continue-pieces", "continue-stream"):
        rows.append(await one(args, v, args.kill_at))
        print(json.dumps(rows[-1]))
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--median", type=int, default=400, help="median response tokens")
    ap.add_argument("--piece-tokens", type=int, default=128)
    ap.add_argument("--kill-at", type=float, default=0.5, help="fraction of the victim's work")
    ap.add_argument("--profile", default="qwen3-4b-h100")
    ap.add_argument("--time-scale", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=default_out("faults.json"),
                    help="result JSON (default: under the system temp dir)")
    args = ap.parse_args(argv)
    rows = asyncio.run(main_async(args))
    args.out.write_text(
        json.dumps({"args": vars(args) | {"out": str(args.out)}, "rows": rows}, indent=2)
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
