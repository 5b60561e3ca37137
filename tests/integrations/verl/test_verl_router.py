"""TailSieve's router inside verl 0.9.1, switched on by ``router_config_path`` alone.

verl's real classes throughout: ``LLMServerManager`` builds the router from the YAML
(``get_router_handle``), ``LLMServerClient`` (v0 and v1 sync trainers) and
``FullyAsyncLLMServerClient`` (v1 async trainers) call it, ``AgentLoopWorker`` runs
``single_turn_agent`` and ``tool_agent`` (with a tool and a tool parser of the tests' own),
and the servers are verl server actors over emulated vLLM servers (``verl_server_actor``).
Every turn of every row is checked against the pieces the servers were asked for.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="verl is not installed (bash scripts/setup_verl.sh)")

import ray
from router_harness import (
    HERE,
    Pool,
    chains,
    check_rows,
    emulated_pool,
    ray_session,  # noqa: F401 - the fixture
    run,
    status,
    verl_config,
    write_yaml,
)
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
from verl.experimental.teacher_loop.teacher_model import TeacherModelManager
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.rollout.llm_server import (
    FullyAsyncLLMServerClient,
    LLMServerClient,
    LLMServerManager,
)
from verl.workers.rollout.router import get_router_handle
from verl_helpers import dataset_row, tiny_model_dir, trainer_batch
from verl_server_actor import teacher_logprob

pytestmark = pytest.mark.usefixtures("ray_session")

N = 2  # rollout.n
EXAMPLE_YAML = HERE.parents[2] / "examples" / "verl" / "tailsieve_router.yaml"
TOOL_AGENT = (
    "actor_rollout_ref.rollout.multi_turn.enable=true",
    f"actor_rollout_ref.rollout.multi_turn.function_tool_path={HERE / 'scripted_tool.py'}",
    "actor_rollout_ref.rollout.multi_turn.format=tailsieve_scripted",
    "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
)
MOVES = {"piece_tokens": 8, "eos_token_ids": [2], "balance": {"interval_s": 0.2, "seam_s": 0.0}}


class CpuServerManager(LLMServerManager):
    """verl's ``LLMServerManager`` minus launching GPU replicas (``create_empty``)."""

    rollout_replica_class = None


@pytest.fixture(scope="module")
def fast_pool() -> Iterator[Pool]:
    """Two fast emulated servers, shared by the tests that leave them as they found them."""
    p = emulated_pool(2)
    yield p
    p.close()


@pytest.fixture(scope="module")
def slow_pool() -> Iterator[Pool]:
    """A straggler and two servers slow enough for moves, weight syncs and a kill (the kill
    test comes last in this file)."""
    p = emulated_pool(3, slow_first=True, time_scale=0.3, median=40.0)
    yield p
    p.close()


@pytest.fixture
def pool2(fast_pool: Pool) -> Pool:
    ray.get(fast_pool.log.clear.remote())
    return fast_pool


@pytest.fixture
def pool3(slow_pool: Pool) -> Pool:
    ray.get(slow_pool.log.clear.remote())
    return slow_pool


def rollout(worker: AgentLoopWorker, num_prompts: int, start: int = 0) -> Any:
    batch = trainer_batch([dataset_row(start + i) for i in range(num_prompts)])
    return run(worker.generate_sequences(batch.repeat(N, interleave=True)))


def test_verl_builds_the_router_from_the_yaml_alone(pool2: Pool) -> None:
    """verl's ``LLMServerManager`` (as the v1 separate-async trainer starts it: no servers,
    added later) builds TailSieve's router from ``rollout.router_config_path`` naming the
    example YAML; clients get verl's "no servers" error until servers are added, then
    generate through it. The emulator serves no model directory, so the example (which names
    no stop ids) runs turns whole and says why."""
    cfg = verl_config(str(EXAMPLE_YAML), "actor_rollout_ref.rollout.nnodes=1")
    mgr = CpuServerManager.create_empty(config=cfg)
    lb = mgr.global_load_balancer
    st = status(lb)
    assert st["policy"] == "tailsieve" and st["active_servers"] == 0
    client = mgr.get_client()
    with pytest.raises(RuntimeError, match="No available servers in load balancer"):
        run(client.generate("t0", prompt_ids=[1, 2], sampling_params={}))
    ray.get(lb.add_servers.remote(pool2.servers))  # as add_replicas_to_balancer does
    assert sorted(ray.get(lb.get_all_servers.remote())) == sorted(pool2.servers)

    async def many() -> list[Any]:
        return await asyncio.gather(*[
            client.generate(f"t{i}", prompt_ids=[5, 6, i], sampling_params={"logprobs": True})
            for i in range(6)])

    outs = run(many())
    assert all(o.stop_reason == "completed" and len(o.log_probs) == len(o.token_ids)
               for o in outs)
    ch = chains(pool2.calls())
    assert sorted((p, t) for p, t, _ in ch.turns) == sorted(
        ([5, 6, i], o.token_ids) for i, o in enumerate(outs))
    first = sorted(pool2.servers)[0]
    ray.get(lb.remove_servers.remote([first]))
    assert ray.get(lb.get_all_servers.remote()) == [s for s in sorted(pool2.servers)
                                                    if s != first]
    cleared = ray.get(lb.clear_sticky_cache.remote())
    assert cleared["cleared_entries"] == 6
    assert "eos_token_ids" in str(status(lb)["moves_off_reason"])
    _wait(lambda: ray.get(lb.get_total_inflight.remote()) == 0)


def test_single_turn_agent_moves_running_turns(tmp_path: Path, pool3: Pool) -> None:
    """``single_turn_agent`` through ``LLMServerClient`` (the v0 trainer's and the v1 sync
    trainer's client) on a straggler and two fast servers: running turns move at piece ends
    and every row is its chain of pieces. Single-turn trajectories never come back from a
    "tool call", so the YAML tells the router not to count them (``tool_wait_weight: 0``);
    counted, they keep the drained servers looking loaded and nothing moves."""
    single = {**MOVES, "session": {"tool_wait_weight": 0.0}}
    router = get_router_handle(pool3.servers, write_yaml(tmp_path / "r.yaml", **single))
    cfg = verl_config(None, f"actor_rollout_ref.rollout.n={N}")
    worker = AgentLoopWorker(cfg, LLMServerClient(cfg, router))
    out = rollout(worker, 12)
    ch = check_rows(out, pool3.calls())
    st = status(router)
    assert st["gateway"]["moves_mid_turn"] > 0 and ch.num_moved > 0, f"nothing moved: {st}"
    assert st["gateway"]["num_turns"] == len(out) == len(ch.turns)
    assert st["moves_off_reason"] is None


def test_tool_agent_turns_are_sessions(tmp_path: Path, pool2: Pool) -> None:
    """``tool_agent`` with a tool of the tests' own: several turns per trajectory, each a
    turn of one session (verl's sticky request id), later turns finding their prefix
    cached; every model turn of every row is its chain of pieces."""
    router = get_router_handle(pool2.servers, write_yaml(tmp_path / "r.yaml", **MOVES))
    cfg = verl_config(None, f"actor_rollout_ref.rollout.n={N}", *TOOL_AGENT)
    worker = AgentLoopWorker(cfg, LLMServerClient(cfg, router))
    out = rollout(worker, 6)
    ch = check_rows(out, pool2.calls())
    st = status(router)
    assert len(ch.turns) > len(out), "no trajectory had a second turn"
    assert st["num_sessions"] == len(out)
    assert st["gateway"]["num_turns"] == len(ch.turns)
    assert st["gateway"]["prefix_hit_tokens"] > 0


def test_sharded_router_runs_each_trajectory_on_one_shard(tmp_path: Path, pool2: Pool) -> None:
    """``shards: 2``: the actor verl built starts a second one and hands each trajectory to
    one of the two by its id; every turn still is its chain of pieces, both shards run turns,
    the sessions split between them and their totals add up to every turn."""
    router = get_router_handle(pool2.servers, write_yaml(tmp_path / "r.yaml", **MOVES,
                                                        shards=2))
    cfg = verl_config(None, f"actor_rollout_ref.rollout.n={N}", *TOOL_AGENT)
    worker = AgentLoopWorker(cfg, LLMServerClient(cfg, router))
    out = rollout(worker, 6)
    ch = check_rows(out, pool2.calls())
    st = status(router)
    assert len(st["shards"]) == 1
    parts = [st, *st["shards"]]
    assert all(p["gateway"]["num_turns"] > 0 for p in parts), parts
    assert sum(p["gateway"]["num_turns"] for p in parts) == len(ch.turns)
    assert sum(p["num_sessions"] for p in parts) == len(out)
    assert st["total_inflight"] == 0


def test_distillation_teacher_has_its_own_router(tmp_path: Path, pool2: Pool) -> None:
    """On-policy distillation: verl's ``TeacherModelManager`` builds the teacher's router
    from the teacher's own ``inference.router_config_path``; the student's turns and the
    teacher's scoring both go through TailSieve. A teacher request (``prompt_logprobs``)
    runs whole on one server and its log-probs reach the rows unchanged."""
    student_yaml = write_yaml(tmp_path / "student.yaml", **MOVES)
    teacher_yaml = write_yaml(tmp_path / "teacher.yaml", policy="sticky-least-loaded")
    cfg = verl_config(
        student_yaml, f"actor_rollout_ref.rollout.n={N}", "distillation.enabled=true",
        "distillation.teacher_models.teacher_model.key=tailsieve/test",
        f"distillation.teacher_models.teacher_model.model_path={tiny_model_dir()}",
        "distillation.teacher_models.teacher_model.num_replicas=2",
        f"+distillation.teacher_models.teacher_model.inference.router_config_path={teacher_yaml}")
    dist = omega_conf_to_dataclass(cfg.distillation)
    (teacher_cfg,) = dist.teacher_models.values()

    class CpuTeacherManager(TeacherModelManager):
        """verl's teacher manager, its servers being the pool's (no GPU replicas)."""

        def _initialize_llm_servers(self) -> None:
            self.server_addresses = list(pool2.servers)
            self.server_handles = list(pool2.servers.values())

    teacher = CpuTeacherManager(dist, teacher_cfg, resource_pool=None)
    assert status(teacher.load_balancer_handle)["policy"] == "sticky-least-loaded"
    student = get_router_handle(pool2.servers, cfg.actor_rollout_ref.rollout.router_config_path)
    worker = AgentLoopWorker(cfg, LLMServerClient(cfg, student), teacher_client={
        teacher_cfg.key: LLMServerClient(cfg, teacher.load_balancer_handle)})
    out = rollout(worker, 3)
    check_rows(out, [c for c in pool2.calls() if "prompt_logprobs" not in c["sampling"]])
    am = out.batch["attention_mask"]
    for i in range(len(out)):
        seq = out.batch["input_ids"][i][am[i] == 1].tolist()
        got = out.batch["teacher_logprobs"][i][am[i] == 1][:, 0].tolist()
        assert got == pytest.approx([teacher_logprob(t) for t in seq[1:]] + [0.0])
    whole = status(teacher.load_balancer_handle)["whole_turns"]
    assert sum(whole.values()) == len(out) and all("prompt_logprobs" in k for k in whole)
    assert status(student)["whole_turns"] == {}


def test_v1_async_client_resumes_across_a_weight_sync(tmp_path: Path, pool3: Pool) -> None:
    """``FullyAsyncLLMServerClient`` (the v1 async trainers' client): a weight sync aborts
    every server mid-turn; the router returns each running turn's tokens marked aborted, as
    the server would, and verl's client resumes it under the new weights through the router.
    Each result is its chains joined, with the weight versions it spans."""
    router = get_router_handle(pool3.servers, write_yaml(tmp_path / "r.yaml", **MOVES))
    actors = list(pool3.actors.values())
    ray.get([a.set_global_steps.remote(0) for a in actors])
    client = FullyAsyncLLMServerClient(verl_config(None), router)
    prompts = [[7, 8, 100 + i] for i in range(8)]

    async def go() -> list[Any]:
        outs = asyncio.gather(*[client.generate(f"a{i}", prompt_ids=p,
                                                sampling_params={"max_tokens": 80})
                                for i, p in enumerate(prompts)])
        await _until_generating(actors)
        await asyncio.gather(*[a.abort_all_requests.remote() for a in actors])
        await asyncio.gather(*[a.set_global_steps.remote(1) for a in actors])
        await asyncio.gather(*[a.resume_generation.remote() for a in actors])
        return list(await outs)

    outs = run(go())
    ch = chains(pool3.calls())
    resumed = 0
    for p, o in zip(prompts, outs, strict=True):
        assert o.token_ids == _follow(ch, p, len(o.token_ids))
        assert 0 < len(o.token_ids) <= 80
        steps = (o.extra_fields["min_global_steps"], o.extra_fields["max_global_steps"])
        assert steps in ((0, 0), (0, 1), (1, 1))
        resumed += steps == (0, 1)
    assert resumed > 0, "no turn was running at the weight sync"


def test_replica_killed_mid_step(tmp_path: Path, pool3: Pool) -> None:
    """A server actor killed while it runs pieces: its turns continue on the others from
    their last seam; every row is correct and nothing is lost or generated twice."""
    router = get_router_handle(pool3.servers, write_yaml(tmp_path / "r.yaml", **MOVES))
    cfg = verl_config(None, f"actor_rollout_ref.rollout.n={N}", *TOOL_AGENT)
    worker = AgentLoopWorker(cfg, LLMServerClient(cfg, router))
    victim = sorted(pool3.servers)[2]
    killer = threading.Thread(target=_kill_when_running, args=(pool3, victim), daemon=True)
    killer.start()
    out = rollout(worker, 6)
    killer.join(timeout=60)
    ch = check_rows(out, pool3.calls())
    gw = status(router)["gateway"]
    assert ch.num_lost_pieces >= 1 and gw["num_relocations"] >= 1
    assert gw["num_failed_turns"] == 0
    assert not next(r for r in gw["replicas"] if r["server"] == victim)["healthy"]


# ----- helpers -------------------------------------------------------------------------------
def _follow(ch: Any, prompt: list[int], length: int) -> list[int]:
    """The tokens of the turns that continue ``prompt`` (an aborted turn, then its resume)."""
    by_prompt = {tuple(p): t for p, t, _ in ch.turns}
    got: list[int] = []
    while len(got) < length and tuple(prompt + got) in by_prompt:
        nxt = by_prompt[tuple(prompt + got)]
        if not nxt:
            break
        got += nxt
    return got


async def _until_running(pool: Pool) -> None:
    while not any(c["tokens"] is None for c in await pool.log.all.remote()):
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)


async def _until_generating(actors: list[Any]) -> None:
    """Return as soon as a server has a request generating (short turns end fast: a fixed
    wait after they start can find none left to abort on a loaded machine)."""
    while not sum(await asyncio.gather(*[a.num_running.remote() for a in actors])):
        await asyncio.sleep(0.005)


def _kill_when_running(pool: Pool, victim: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        calls = ray.get(pool.log.all.remote())
        if any(c["server"] == victim and c["tokens"] is None for c in calls):
            pool.kill(victim)  # at once: a piece here lasts tens of ms, and one that ended
            return  # before the kill leaves nothing in flight to lose (a flaky test)
        time.sleep(0.01)
    raise AssertionError(f"{victim} never ran a piece")


def _wait(cond: Any, limit_s: float = 30.0) -> None:
    deadline = time.monotonic() + limit_s
    while not cond():
        assert time.monotonic() < deadline, "state never reached"
        time.sleep(0.05)
