"""An emulated vLLM replica: OpenAI-compatible HTTP endpoints whose timing comes from the
throughput model's continuous-batching engine (``model.replica_engine``).

In-process (tests)::

    async with run_emulator(EmulatorConfig.from_profile("cpu", time_scale=0.01)) as url: ...

As subprocesses (demo, fault tests)::

    with EmulatorFleet.start(4, profile="cpu", time_scale=0.01) as fleet: fleet.urls
"""

from tailsieve.runtime.emulator.config import CRASH_EXIT_CODE, EmulatorConfig
from tailsieve.runtime.emulator.procs import EmulatorFleet, EmulatorProcess
from tailsieve.runtime.emulator.server import EmulatorServer, run_emulator

__all__ = [
    "CRASH_EXIT_CODE",
    "EmulatorConfig",
    "EmulatorFleet",
    "EmulatorProcess",
    "EmulatorServer",
    "run_emulator",
]
