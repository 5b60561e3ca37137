"""The verl router plug-in's test harness: Ray, server actors over emulated or real vLLM
servers, the router YAML, verl's config, and checks of every turn's chain of pieces.

Server ids are the HTTP servers' ``host:port``, as verl's ids are its servers' addresses.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="verl is not installed (bash scripts/setup_verl.sh)")

import ray
import verl
import yaml
from call_log import CallLog
from hydra import compose, initialize_config_dir
from verl_helpers import tiny_model_dir
from verl_server_actor import HttpServerActor

from tailsieve.integrations.loop_thread import LoopThread
from tailsieve.runtime.emulator import EmulatorConfig, EmulatorServer

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[2] / "src"
ROUTER_CLASS = "tailsieve.integrations.verl.router.TailSieveRouter"
PROMPT_LEN, RESPONSE_LEN, MAX_LEN = 256, 96, 1024
EMULATED_MODEL = "tailsieve-emulated"


RAY_START_TRIES = 3


def start_ray() -> None:
    """A new local Ray whose workers import this checkout's ``tailsieve`` and these helpers.

    ``address="local"`` never joins a cluster named by ``RAY_ADDRESS`` or left behind in
    ``/tmp/ray/ray_current_cluster``. A start that fails (a node slow to come up on a busy
    machine) is shut down, printed and tried again, up to ``RAY_START_TRIES`` times.
    """
    if ray.is_initialized():
        return
    paths = [str(SRC), str(HERE), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    for attempt in range(1, RAY_START_TRIES + 1):
        try:
            ray.init(address="local", num_cpus=16, include_dashboard=False,
                     object_store_memory=100 * 1024 * 1024, log_to_driver=True,
                     configure_logging=False)
            return
        except Exception as err:
            print(f"start_ray: ray.init failed (try {attempt} of {RAY_START_TRIES}): "
                  f"{type(err).__name__}: {err}", file=sys.stderr, flush=True)
            ray.shutdown()
            if attempt == RAY_START_TRIES:
                raise
            time.sleep(2.0 * attempt)


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    start_ray()
    yield
    ray.shutdown()


def rollout_dict(**over: Any) -> dict[str, Any]:
    """What a verl server's ``get_rollout_config()`` reports (the fields the router reads)."""
    base = {"name": "vllm", "prompt_length": PROMPT_LEN, "response_length": RESPONSE_LEN,
            "max_model_len": MAX_LEN, "ignore_eos": False, "repetition_penalty": 1.0,
            "full_determinism": False, "enable_rollout_routing_replay": False}
    base.update(over)
    return base


def server_id(url: str) -> str:
    return url.split("://", 1)[-1].rstrip("/")


@dataclass
class Pool:
    """HTTP servers (emulated or real), one verl server actor in front of each."""

    urls: list[str]
    model: str
    rollout: dict[str, Any] = field(default_factory=rollout_dict)
    emulators: list[EmulatorServer] = field(default_factory=list)
    loop: LoopThread | None = None
    actors: dict[str, Any] = field(default_factory=dict)
    log: Any = None

    def __post_init__(self) -> None:
        self.log = ray.remote(CallLog).remote()
        actor_cls = ray.remote(HttpServerActor)
        for url in self.urls:
            sid = server_id(url)
            self.actors[sid] = actor_cls.options(max_concurrency=1000).remote(
                url, self.rollout, self.model, sid, self.log)

    @property
    def servers(self) -> dict[str, Any]:
        return dict(self.actors)

    def calls(self) -> list[dict[str, Any]]:
        return list(ray.get(self.log.all.remote()))

    def kill(self, sid: str) -> None:
        ray.kill(self.actors[sid], no_restart=True)

    def close(self) -> None:
        for a in [*self.actors.values(), self.log]:
            ray.kill(a, no_restart=True)
        if self.loop is not None:
            for s in self.emulators:
                if not s.crashed:
                    self.loop.run(s.aclose())
            self.loop.close()


def emulated_pool(n: int, *, slow_first: bool = False, time_scale: float = 0.02,
                  median: float = 24.0, seed: int = 0, **rollout: Any) -> Pool:
    """``n`` emulated vLLM servers (cached-token counts on); the first at half speed when
    ``slow_first`` (a straggler)."""
    loop = LoopThread("router-emulators")
    servers = [
        EmulatorServer(EmulatorConfig.from_profile(
            "cpu", time_scale=time_scale, seed=seed + i, length_median_tokens=median,
            max_model_len=MAX_LEN, prompt_tokens_details=True,
            slowdown=2.0 if slow_first and i == 0 else 1.0))
        for i in range(n)
    ]
    urls = [loop.run(s.start()) for s in servers]
    return Pool(urls, EMULATED_MODEL, rollout_dict(**rollout), servers, loop)


def write_yaml(path: Path, **options: Any) -> str:
    """A router YAML naming TailSieve's router; ``options`` as the file's keys."""
    path.write_text(yaml.safe_dump({"router_class": ROUTER_CLASS, **options}))
    return str(path)


def verl_config(router_yaml: str | None, *extra: str, backend: str = "vllm") -> Any:
    """verl's real ``ppo_trainer`` config with the router YAML switched on (one override)."""
    cfg_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    overrides = [
        f"actor_rollout_ref.model.path={tiny_model_dir()}",
        f"actor_rollout_ref.rollout.name={backend}",
        f"actor_rollout_ref.rollout.prompt_length={PROMPT_LEN}",
        f"actor_rollout_ref.rollout.response_length={RESPONSE_LEN}",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        *extra,
    ]
    if router_yaml is not None:
        overrides.append(f"actor_rollout_ref.rollout.router_config_path={router_yaml}")
    with initialize_config_dir(config_dir=cfg_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def run(coro: Any) -> Any:
    """Run ``coro`` on a fresh event loop (the driver's verl clients are asyncio code)."""
    return asyncio.run(coro)


def status(router: Any) -> dict[str, Any]:
    return dict(ray.get(router.get_status.remote()))


# ----- checks of the pieces every turn was cut into --------------------------------------
PIECE_ID = re.compile(r"^(?P<turn>.+-t\d+)-(?P<n>\d+)$")  # the gateway's piece request ids


@dataclass
class Chains:
    """What the servers were asked, turn by turn (from the ``CallLog``)."""

    turns: list[tuple[list[int], list[int], list[str]]]  # prompt, joined tokens, servers
    num_pieces: int
    num_lost_pieces: int  # pieces asked again at the same seam (their server was killed)
    num_whole: int

    @property
    def num_moved(self) -> int:
        """Turns whose pieces ran on more than one server."""
        return sum(len(set(servers)) > 1 for _, _, servers in self.turns)


def chains(calls: list[dict[str, Any]]) -> Chains:
    """Every turn the router cut into pieces, checked piece by piece: piece ``k`` was asked
    with the turn's prompt plus exactly the tokens its earlier answered pieces returned (a
    piece lost with its server is asked again from the same seam)."""
    groups: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    whole = 0
    for c in calls:
        m = PIECE_ID.match(str(c["request_id"]))
        if m is None:
            whole += 1
            continue
        groups.setdefault(m["turn"], []).append((int(m["n"]), c))
    turns, pieces, lost = [], 0, 0
    for key, items in groups.items():
        by_n: dict[int, list[dict[str, Any]]] = {}
        for n, c in items:  # in the order the servers were asked
            by_n.setdefault(n, []).append(c)
        assert sorted(by_n) == list(range(len(by_n))), f"turn {key}: pieces missing"
        prompt = list(by_n[0][0]["prompt_ids"])
        got: list[int] = []
        servers: list[str] = []
        for n in range(len(by_n)):
            for c in by_n[n]:  # a piece lost with its server, then its retry at the same seam
                assert list(c["prompt_ids"]) == prompt + got, (
                    f"turn {key}: piece {n} was asked with a prefix other than the turn's "
                    f"prompt plus the {len(got)} tokens before it")
                servers.append(c["server"])
            pieces += 1
            lost += len(by_n[n]) - 1
            last = by_n[n][-1]
            assert last["tokens"] is not None, f"turn {key}: its last piece never answered"
            got.extend(int(t) for t in last["tokens"])
        turns.append((prompt, got, servers))
    return Chains(turns, pieces, lost, whole)


def match_delivered(ch: Chains, delivered: list[tuple[list[int], list[int]]]) -> None:
    """Each delivered turn is exactly one chain (nothing lost, nothing doubled)."""
    pool = Counter((tuple(p), tuple(t)) for p, t, _ in ch.turns)
    for prompt, tokens in delivered:
        key = (tuple(prompt), tuple(tokens))
        assert pool[key] > 0, (f"a delivered turn of {len(tokens)} tokens is no chain of "
                               "the pieces the servers were asked for")
        pool[key] -= 1


def row_turns(out: Any) -> list[list[tuple[list[int], list[int]]]]:
    """Each row of an agent loop's output as its turns: ``(prompt, tokens)`` per run of the
    response mask (the model's tokens; a tool's are masked out), the prompt being everything
    before the run."""
    rows = []
    am, ids, rm = (out.batch[k] for k in ("attention_mask", "input_ids", "response_mask"))
    for i in range(len(out)):
        prompt = ids[i, :PROMPT_LEN][am[i, :PROMPT_LEN] == 1].tolist()
        keep = am[i, PROMPT_LEN:] == 1
        resp = ids[i, PROMPT_LEN:][keep].tolist()
        mask = rm[i][keep].tolist()
        turns, k = [], 0
        while k < len(mask):
            if mask[k] != 1:
                k += 1
                continue
            e = k
            while e < len(mask) and mask[e] == 1:
                e += 1
            turns.append((prompt + resp[:k], resp[k:e]))
            k = e
        rows.append(turns)
    return rows


def check_rows(out: Any, calls: list[dict[str, Any]]) -> Chains:
    """Every model turn of every row is exactly one chain of pieces the servers were asked
    for (a row's last turn may be cut at ``response_length``), and every chain is one turn
    of one row: nothing lost, nothing generated twice."""
    ch = chains(calls)
    pool = Counter((tuple(p), tuple(t)) for p, t, _ in ch.turns)
    delivered = 0
    for turns in row_turns(out):
        for j, (prompt, tokens) in enumerate(turns):
            key = (tuple(prompt), tuple(tokens))
            if pool[key] == 0 and j == len(turns) - 1:  # cut at response_length
                key = next((k for k, n in pool.items() if n and k[0] == key[0]
                            and k[1][: len(tokens)] == key[1]), key)
            assert pool[key] > 0, f"a row's turn of {len(tokens)} tokens is no chain of pieces"
            pool[key] -= 1
            delivered += 1
    assert delivered == len(ch.turns), (
        f"{len(ch.turns)} turns generated, {delivered} delivered in rows")
    return ch
