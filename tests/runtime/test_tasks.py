"""``runtime.tasks``: a background task starts once, stops on ``aclose`` (which waits for its
end) and may start again; an error it crashed with is raised at close, a cancel is not."""

from __future__ import annotations

import asyncio

import pytest

from tailsieve.runtime.tasks import BackgroundTask, cancel_and_wait


async def test_a_background_task_starts_once_and_stops_at_close() -> None:
    started: list[int] = []
    cleaned: list[int] = []

    async def loop() -> None:
        started.append(1)
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0)  # its clean-up may await: close waits for it
            cleaned.append(1)

    bg = BackgroundTask("loop")
    bg.start(loop)
    bg.start(loop)  # running already: no second one
    await asyncio.sleep(0)
    assert started == [1] and bg.task is not None and bg.task.get_name() == "loop"
    await bg.aclose()
    assert cleaned == [1] and bg.task is None
    await bg.aclose()  # closed: nothing to do
    bg.start(loop)  # and it starts again
    await asyncio.sleep(0)
    assert started == [1, 1]
    await bg.aclose()
    assert cleaned == [1, 1]


async def test_a_crashed_task_raises_its_error_at_close() -> None:
    async def crash() -> None:
        raise ValueError("the loop broke")

    bg = BackgroundTask("crash")
    bg.start(crash)
    await asyncio.sleep(0)
    with pytest.raises(ValueError, match="the loop broke"):
        await bg.aclose()


async def test_cancel_and_wait_stops_every_task_and_skips_none() -> None:
    tasks = [asyncio.create_task(asyncio.sleep(60)) for _ in range(3)]
    done = asyncio.create_task(asyncio.sleep(0))
    await done
    await cancel_and_wait(None, *tasks, done)
    assert all(t.cancelled() for t in tasks) and not done.cancelled()


async def test_a_crash_waits_for_the_others_and_the_task_may_start_again() -> None:
    cleaned: list[int] = []

    async def crash() -> None:
        raise ValueError("the loop broke")

    async def slow_cleanup() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.01)
            cleaned.append(1)

    first, second = asyncio.create_task(crash()), asyncio.create_task(slow_cleanup())
    await asyncio.sleep(0)
    with pytest.raises(ValueError, match="the loop broke"):
        await cancel_and_wait(first, second)
    assert cleaned == [1] and second.done()  # the crash did not cut the wait short
    bg = BackgroundTask("crash")
    bg.start(crash)
    await asyncio.sleep(0)
    with pytest.raises(ValueError):
        await bg.aclose()
    assert bg.task is None  # a crashed loop may be started again


async def test_all_or_first_error_waits_for_all_and_returns_in_order() -> None:
    import asyncio

    from tailsieve.runtime.tasks import all_or_first_error

    async def after(delay_s: float, value: int) -> list[int]:
        await asyncio.sleep(delay_s)
        return [value]

    got = await all_or_first_error([after(0.03, 0), after(0.0, 1), after(0.01, 2)])
    assert got == [[0], [1], [2]]
    assert await all_or_first_error([]) == []


async def test_all_or_first_error_cancels_the_rest_and_prefers_a_dead_replica() -> None:
    import asyncio

    from tailsieve.runtime.engine.transport import ReplicaDownError, RequestError
    from tailsieve.runtime.tasks import all_or_first_error

    cancelled: list[int] = []

    async def slow(i: int) -> list[int]:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(i)
            raise
        return [i]

    async def fail(exc: Exception) -> list[int]:
        raise exc

    with pytest.raises(RequestError):
        await all_or_first_error([slow(0), fail(RequestError("bad")), slow(1)])
    assert sorted(cancelled) == [0, 1]  # nothing left running after the error
    with pytest.raises(ReplicaDownError):  # both fail at once: the dead replica wins
        await all_or_first_error([fail(RequestError("bad")), fail(ReplicaDownError("gone"))])
