"""verl's ``RequestLoadBalancer`` protocol of the router, in-process over toy servers whose
next token is a function of the prefix: a turn cut into pieces, moved or continued after a
server died must return exactly the tokens of one unbroken request.

Each router lives on one event loop (a ``LoopThread``), as it does in its Ray actor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("verl", reason="verl is not installed (bash scripts/setup_verl.sh)")

from fake_servers import EOS, FakeServer, long_prompt, toy_generate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailsieve.integrations.loop_thread import LoopThread
from tailsieve.integrations.verl.router import NO_SERVERS, VerlSessionRouter
from tailsieve.integrations.verl.turn_handle import GATEWAY_ID, TurnHandle

ROLLOUT = {"name": "vllm", "prompt_length": 64, "response_length": 40, "max_model_len": 128}
YAML = {"eos_token_ids": [EOS], "piece_tokens": 4}


def servers(n: int, **rollout: Any) -> dict[str, FakeServer]:
    return {f"10.0.0.{i}:80": FakeServer(f"s{i}", {**ROLLOUT, **rollout}) for i in range(n)}


LOOP: list[LoopThread] = []
ROUTERS: list[VerlSessionRouter] = []


@pytest.fixture(autouse=True)
def loop() -> Iterator[None]:
    """The event loop this test's routers live on; they are closed on it at the end."""
    LOOP.append(LoopThread("router-test"))
    yield
    close_routers()
    LOOP.pop().close()


def router(srv: dict[str, FakeServer], yaml: dict[str, Any]) -> VerlSessionRouter:
    r = VerlSessionRouter(srv, yaml)
    ROUTERS.append(r)
    return r


def close_routers() -> None:
    while ROUTERS:
        run(ROUTERS.pop().aclose)


def run(make: Callable[[], Awaitable[Any]]) -> Any:
    return LOOP[-1].run(_run(make))


async def _run(make: Callable[[], Awaitable[Any]]) -> Any:
    return await make()


async def turn(r: VerlSessionRouter, rid: str, prompt: list[int], **sampling: Any) -> Any:
    """One turn as ``LLMServerClient.generate`` makes it: acquire, generate, release."""
    sid, handle = await r.acquire_server(rid)
    try:
        if isinstance(handle, TurnHandle):
            return await r.generate_turn(handle.session, request_id="fresh", prompt_ids=prompt,
                                         sampling_params=dict(sampling))
        return await handle.generate.remote(request_id="fresh", prompt_ids=prompt,
                                            sampling_params=dict(sampling))
    finally:
        await r.release_server(sid, rid)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prompts=st.lists(st.lists(st.integers(3, 300), min_size=1, max_size=12), min_size=1,
                        max_size=6),
       piece=st.integers(1, 9), turns=st.integers(1, 3))
def test_pieces_join_to_the_unbroken_answer(prompts: list[list[int]], piece: int,
                                            turns: int) -> None:
    """Every turn of every trajectory, cut into pieces of any size, equals one unbroken
    request for the same prompt (tokens, log-probs), turn after turn."""
    LOOP.append(LoopThread("router-example"))  # one loop per example
    r = router(servers(3), {**YAML, "piece_tokens": piece})

    async def go() -> None:
        async def traj(i: int, prompt: list[int]) -> None:
            ctx = list(prompt)
            for _ in range(turns):
                out = await turn(r, f"t{i}", ctx, logprobs=True)
                want = toy_generate(ctx, min(40, 64 + 40 - len(ctx)))
                assert out.token_ids == want
                assert out.log_probs == [-0.01 * t for t in want]
                assert out.stop_reason == "completed"
                ctx = ctx + out.token_ids + [5, 6]  # a tool's observation
        await asyncio.gather(*[traj(i, p) for i, p in enumerate(prompts)])

    try:
        run(go)
        st_ = run(r.get_status)
    finally:
        close_routers()
        LOOP.pop().close()
    assert st_["gateway"]["num_turns"] == len(prompts) * turns
    assert st_["num_sessions"] == len(prompts)


def test_protocol_methods() -> None:
    srv = servers(2)
    r = router(srv, YAML)

    async def go() -> None:
        assert r.require_acquire_fields() == [] and r.require_release_fields() == []
        sid, handle = await r.acquire_server("a")
        assert sid == GATEWAY_ID and isinstance(handle, TurnHandle) and handle.session == "a"
        assert await r.get_total_inflight() == 1
        await r.release_server(sid, "a")
        assert await r.get_total_inflight() == 0
        await turn(r, "a", [9, 9, 9])
        await turn(r, "b", [8, 8])
        st_ = await r.get_status()
        assert st_["active_servers"] == 2 and st_["policy"] == "tailsieve"
        assert set(st_["servers"]) == set(srv) and st_["moves_off_reason"] is None
        assert (await r.clear_sticky_cache())["cleared_entries"] == 2
        await r.remove_servers(list(srv))
        assert await r.get_all_servers() == []
        with pytest.raises(RuntimeError, match=NO_SERVERS):
            await r.acquire_server("c")
        await r.add_servers(srv)
        out = await turn(r, "c", [7, 7])
        assert out.token_ids == toy_generate([7, 7], 40)

    run(go)


def test_a_server_that_dies_mid_turn_costs_nothing_of_the_answer() -> None:
    """The server running a turn dies; the turn continues on the other from its last seam
    and the answer is the unbroken one."""
    srv = servers(2)
    for s in srv.values():
        s.token_s = 0.002
    r = router(srv, YAML)
    prompt = long_prompt(40)

    async def go() -> Any:
        task = asyncio.ensure_future(turn(r, "k", prompt, max_tokens=40))
        while not any(s.calls for s in srv.values()):
            await asyncio.sleep(0.001)
        victim = next(s for s in srv.values() if s.calls)
        while len(victim.calls) < 2:
            await asyncio.sleep(0.001)
        victim.dead = True
        return await task

    out = run(go)
    assert out.token_ids == toy_generate(prompt, 40)
    gw = run(r.get_status)["gateway"]
    assert gw["num_relocations"] == 1 and gw["num_failed_turns"] == 0


def test_an_abort_returns_what_the_turn_has() -> None:
    """verl's weight sync aborts the servers: the turn comes back marked aborted with every
    token generated so far, and verl's client resumes it with them as its prompt."""
    srv = servers(1)
    only = next(iter(srv.values()))
    only.token_s = 0.002
    r = router(srv, YAML)
    prompt = long_prompt(40, start=50)

    async def go() -> Any:
        task = asyncio.ensure_future(turn(r, "w", prompt, max_tokens=40))
        while len(only.calls) < 3:
            await asyncio.sleep(0.001)
        only.abort_all()
        return await task

    out = run(go)
    assert out.stop_reason == "aborted" and out.token_ids
    assert out.token_ids == toy_generate(prompt, 40)[: len(out.token_ids)]
    rest = run(lambda: turn(r, "w", prompt + out.token_ids,
                            max_tokens=40 - len(out.token_ids)))
    assert out.token_ids + rest.token_ids == toy_generate(prompt, 40)


def test_whole_turns_go_verbatim_to_one_server() -> None:
    """Multimodal inputs and a teacher's prompt_logprobs cannot be continued: verl's call
    goes unchanged to the server the session router chose."""
    srv = servers(2)
    r = router(srv, YAML)

    async def go() -> list[Any]:
        outs = []
        for kw in ({"image_data": ["img"]}, {"sampling_params": {"prompt_logprobs": 0}}):
            sid, h = await r.acquire_server("m")
            call = {"request_id": "x", "prompt_ids": [4, 4], "sampling_params": {}, **kw}
            outs.append(await r.generate_turn(h.session, **call))
            await r.release_server(sid)
        return outs

    outs = run(go)
    calls = [c for s in srv.values() for c in s.calls]
    assert len(calls) == 2 and calls[0]["image_data"] == ["img"]
    assert all(c["request_id"] == "x" for c in calls)  # verl's own id: sent as it came
    assert outs[0].token_ids == toy_generate([4, 4], 40)
    whole = run(r.get_status)["whole_turns"]
    assert sum(whole.values()) == 2 and any("multimodal" in k for k in whole)


def test_a_whole_turn_whose_server_dies_starts_again_on_the_other() -> None:
    """A whole turn (multimodal) on a server that dies: the server is taken out and verl's
    call goes again, unchanged, to the other."""
    srv = servers(2)
    for s in srv.values():
        s.token_s = 0.002
    r = router(srv, YAML)

    async def go() -> Any:
        sid, h = await r.acquire_server("mm")
        call = {"request_id": "x", "prompt_ids": [4, 4], "sampling_params": {},
                "image_data": ["img"]}
        task = asyncio.ensure_future(r.generate_turn(h.session, **call))
        while not any(s.calls for s in srv.values()):
            await asyncio.sleep(0.001)
        next(s for s in srv.values() if s.calls).dead = True
        out = await task
        await r.release_server(sid)
        return out

    out = run(go)
    first, second = (next(s for s in srv.values() if s.dead),
                     next(s for s in srv.values() if not s.dead))
    assert out.token_ids == toy_generate([4, 4], 40)
    assert len(first.calls) == 1 and len(second.calls) == 1
    assert second.calls[0]["image_data"] == ["img"] and second.calls[0]["request_id"] == "x"
    st = run(r.get_status)
    assert sum(st["whole_turns"].values()) == 1
    reps = {r["server"]: r for r in st["gateway"]["replicas"]}
    assert [srv[k].dead for k in reps if not reps[k]["healthy"]] == [True]
    assert st["gateway"]["num_running"] == 0 and all(r["num_running"] == 0 for r in reps.values())


def test_full_determinism_routes_by_verl_s_hash_rule() -> None:
    srv = servers(3, full_determinism=True)
    r = router(srv, YAML)

    async def go() -> set[str]:
        got = set()
        for _ in range(3):
            sid, handle = await r.acquire_server("det-7")
            assert handle is srv[sid]
            got.add(sid)
        return got

    got = run(go)
    assert len(got) == 1
    assert "full_determinism" in str(run(r.get_status)["moves_off_reason"])


def test_unknown_stop_ids_turn_moves_off_with_the_reason() -> None:
    """Without the model's stop ids the router cannot tell a stop at a piece's cap from a
    cut: turns run whole and sticky, and get_status says why."""
    r = router(servers(2), {})  # no eos_token_ids, no model_path, no /v1/models
    out = run(lambda: turn(r, "u", [3, 4, 5]))
    assert out.token_ids == toy_generate([3, 4, 5], 40)
    why = run(r.get_status)["moves_off_reason"]
    assert why is not None and "eos_token_ids" in why


def test_new_weights_end_a_step_for_the_balance_gate() -> None:
    """verl never says a step ended; new weights in the servers' answers do. The step is
    timed and priced for the gateway's balance gate, and the sessions (whose prefix caches
    the weight sync reset) end."""
    srv = servers(2)
    r = router(srv, YAML)

    async def go() -> tuple[int, int]:
        await asyncio.gather(*[turn(r, f"s{i}", [i + 3, 4, 5]) for i in range(4)])
        assert r.gateway is not None and not r.gateway.gate.state.balanced
        assert len(r.step.trajectories()) == 4 and r.step.observed_s > 0
        sessions = len(r.sessions)
        for s in srv.values():
            s.version = 1
        await turn(r, "s9", [9, 9])
        return sessions, len(r.gateway.gate.state.balanced)

    sessions, observed = run(go)
    assert sessions == 4 and observed == 1
    assert len(r.sessions) == 1  # the idle ones ended with the old weights
    assert len(r.step.trajectories()) == 1  # the next step holds the new turn only


def test_a_training_step_is_timed_around_its_rollout() -> None:
    """Between two steps no turn runs while verl trains: the router takes the rollout's share
    of the training step from that gap and reports it (no speedup before the balance gate
    has measured steps with and without moves)."""
    srv = servers(2)
    r = router(srv, YAML)

    async def go() -> float:
        await asyncio.gather(*[turn(r, f"s{i}", [i + 3, 4, 5]) for i in range(4)])
        rollout_s = r.step.observed_s
        await asyncio.sleep(0.3)  # verl trains
        for s in srv.values():
            s.version = 1
        await turn(r, "s9", [9, 9])
        return rollout_s

    rollout_s = run(go)
    timing = run(r.get_status)["training_step"]
    assert timing is not None and timing["rollout_s"] == pytest.approx(rollout_s)
    assert timing["step_s"] >= rollout_s + 0.3
    assert timing["rollout_share"] == pytest.approx(rollout_s / timing["step_s"])
    assert timing["rollout_speedup"] is None and timing["step_speedup"] is None
