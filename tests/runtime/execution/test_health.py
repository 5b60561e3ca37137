"""The one health model (``runtime.execution.health``): out at a fault, probed, back when it answers."""

from __future__ import annotations

import asyncio

import pytest

from tailsieve.errors import ReplicaError
from tailsieve.runtime.execution.health import ReplicaHealth


def fleet(answers: dict[int, str], interval_s: float = 0.001) -> tuple[ReplicaHealth, list[tuple[int, bool]]]:
    told: list[tuple[int, bool]] = []

    async def probe(r: int) -> str:
        await asyncio.sleep(0)
        return answers.get(r, "")

    h = ReplicaHealth(["http://a/", "http://b"], probe, interval_s,
                      lambda r, ok: told.append((r, ok)))
    return h, told


async def test_a_fault_takes_out_once_and_the_probe_returns_it() -> None:
    answers = {1: "refused"}
    h, told = fleet(answers)
    assert h.urls == ["http://a", "http://b"]
    assert h.down(1, ReplicaError("boom")) and not h.down(1, ReplicaError("again"))
    assert h.healthy == [True, False] and h.num_faults == [0, 1]
    assert h.last_error[1] == "ReplicaError: boom"
    await asyncio.sleep(0.02)
    assert not h.healthy[1]  # still refused: still out, the fault kept as the reason
    answers.clear()
    await h.wait_any(1.0)
    for _ in range(100):
        if h.healthy[1]:
            break
        await asyncio.sleep(0.002)
    assert h.healthy == [True, True] and h.num_readmitted == 1
    assert told == [(1, False), (1, True)] and h.state(1).reason == "ReplicaError: boom"
    await h.aclose()


async def test_concurrent_probes_readmit_once_and_a_failed_probe_is_no_fault() -> None:
    answers = {0: "down"}
    h, _ = fleet(answers, interval_s=10.0)
    assert not await h.probe(0)  # in service, does not answer: out, not counted as a fault
    assert h.healthy == [False, True] and h.num_faults == [0, 0]
    answers.clear()
    assert all(await asyncio.gather(h.probe(0), h.probe(0), h.probe(0)))
    assert h.healthy == [True, True] and h.num_readmitted == 1
    await h.aclose()


async def test_a_moved_replica_is_probed_at_its_new_address_and_not_blamed() -> None:
    h, _ = fleet({}, interval_s=10.0)
    h.move(1, "http://b2/")
    s = h.state(1)
    assert (s.url, s.healthy, s.num_faults) == ("http://b2", False, 0)
    assert s.reason == "moved from http://b to http://b2"
    assert await h.probe(1) and h.healthy[1]
    await h.aclose()


async def test_no_replica_in_service_is_an_error_after_the_limit() -> None:
    h, _ = fleet({0: "x", 1: "x"}, interval_s=10.0)
    h.down(0, "x")
    h.down(1, "x")
    with pytest.raises(ReplicaError, match="no healthy replica"):
        await h.wait_any(0.01)
    await h.aclose()


def test_probes_restart_on_a_new_event_loop() -> None:
    """A replica out when one ``asyncio.run`` ended (its probe cancelled with the loop) is
    probed again under the next one."""
    answers = {0: "down"}
    h, _ = fleet(answers)

    async def first() -> None:
        h.down(0, "boom")
        await asyncio.sleep(0.01)  # its probe task runs on this loop, which then closes

    async def second() -> None:
        answers.clear()
        h.watch(0)
        for _ in range(200):
            if h.healthy[0]:
                break
            await asyncio.sleep(0.002)
        await h.aclose()

    asyncio.run(first())
    asyncio.run(second())
    assert h.healthy[0] and h.num_readmitted == 1
