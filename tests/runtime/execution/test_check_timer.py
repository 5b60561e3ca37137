"""When a re-balance check is due (``runtime.execution.check_timer``): an interval after the last check,
half an interval once poked; a poke wakes a wait early; a cancel that arrives with a poke is
not lost; a model clock's interval is waited in its real time."""

from __future__ import annotations

import asyncio
import time

import pytest

from tailsieve.errors import ConfigError
from tailsieve.runtime.execution.check_timer import CheckTimer
from tailsieve.runtime.execution.model_clock import ModelClock, time_scale_of


def _timer(ago_s: float) -> CheckTimer:
    loop = asyncio.get_running_loop()
    return CheckTimer(loop.time, loop.time() - ago_s)


def test_a_check_is_due_an_interval_after_the_last_one() -> None:
    async def main() -> tuple[float, bool]:
        t = _timer(0.0)
        await t.until_due(0.2)
        return t.clock() - t.last_s, t.poked

    waited, poked = asyncio.run(main())
    assert 0.2 <= waited < 0.4 and not poked


def test_the_first_check_of_a_timer_that_never_checked_is_due_at_once() -> None:
    async def main() -> float:
        t = CheckTimer(asyncio.get_running_loop().time, float("-inf"))
        t0 = t.clock()
        await t.until_due(60.0)
        return t.clock() - t0

    assert asyncio.run(main()) < 1.0


def test_a_poke_before_the_wait_brings_the_check_to_half_an_interval() -> None:
    async def main() -> tuple[float, bool]:
        t = _timer(0.0)
        t.poke()
        await t.until_due(0.4)
        return t.clock() - t.last_s, t.poked

    waited, poked = asyncio.run(main())
    assert 0.2 <= waited < 0.4 and not poked  # the poke is spent


def test_a_poke_while_waiting_wakes_the_wait_once_half_an_interval_has_passed() -> None:
    async def main() -> tuple[float, bool]:
        t = _timer(0.6)  # half of 1 s has passed: due at once when poked, else in 0.4 s
        t0 = t.clock()
        asyncio.get_running_loop().call_later(0.05, t.poke)
        await t.until_due(1.0)
        return t.clock() - t0, t.poked

    waited, poked = asyncio.run(main())
    assert 0.05 <= waited < 0.3 and not poked


def test_a_poke_before_half_an_interval_waits_for_the_half() -> None:
    async def main() -> float:
        t = _timer(0.0)
        asyncio.get_running_loop().call_later(0.02, t.poke)
        await t.until_due(0.3)
        return t.clock() - t.last_s

    assert 0.15 <= asyncio.run(main()) < 0.3


def test_a_cancel_that_arrives_with_a_poke_ends_the_wait() -> None:
    async def main() -> bool:
        t = _timer(0.6)
        task = asyncio.ensure_future(t.until_due(1.0))
        await asyncio.sleep(0.02)  # waiting
        t.poke()  # makes the check due ...
        task.cancel()  # ... as the step ends
        await asyncio.wait({task})
        return task.cancelled()

    assert asyncio.run(main())


def test_a_model_clock_s_interval_is_waited_in_its_real_time() -> None:
    """A timer on a ``ModelClock`` (10 model seconds per real second) waits 0.2 real s for an
    interval of 2 model s, not 2 real s."""
    async def main() -> tuple[float, float]:
        clock = ModelClock(0.1)
        t = CheckTimer(clock, clock(), time_scale_of(clock))
        real0 = asyncio.get_running_loop().time()
        await t.until_due(2.0)
        return t.clock() - t.last_s, asyncio.get_running_loop().time() - real0

    model_s, real_s = asyncio.run(main())
    assert 2.0 <= model_s < 4.0 and 0.2 <= real_s < 0.4


def test_a_model_clock_needs_a_positive_scale_and_other_clocks_run_in_real_seconds() -> None:
    with pytest.raises(ConfigError, match="time_scale must be > 0"):
        ModelClock(0.0)
    assert time_scale_of(time.monotonic) == 1.0 and time_scale_of(ModelClock(0.5)) == 0.5
