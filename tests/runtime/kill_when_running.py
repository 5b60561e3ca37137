"""Kill a vLLM server's process group while its engine is generating, judged from the engine's
own CPU time, in a process of its own.

    python kill_when_running.py PGID

On a loaded machine every HTTP signal can come late: the client reading many streams ran its
callbacks and threads seconds behind, and a ``/metrics`` call to the server once came back 9 s
late, with its counts of before the step, while the engine finished every request. The
engine's processes (the group but its leader: EngineCore and its workers) use CPU only while
they run requests, and whatever they are generating now has not all reached the client. So
this reads their CPU time every ``POLL_S`` and SIGKILLs the group when it grew by
``BUSY_FRACTION`` of the interval or more, over an interval of at most ``FRESH_S`` from the
start of the last reading to the end of this one (a longer one, this process kept off the CPU,
says nothing of now). Prints ``ready`` once it has a first reading (the caller starts the
requests then), and one JSON line as it ends (so, or by SIGTERM): ``killed_s``,
``time.monotonic()`` of the kill (the clock every process shares), null when it did not kill.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

POLL_S = 0.1
FRESH_S = 0.5
BUSY_FRACTION = 0.2


def engine_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system) used so far by the processes of group ``pgid`` but its
    leader."""
    ticks = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == pgid:
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended meanwhile
        if int(fields[2]) == pgid:  # fields from the state on: pgrp, ..., utime, stime
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def main(pgid: int) -> None:
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    killed_s = None
    last_s, last_cpu = time.monotonic(), engine_cpu_s(pgid)
    print("ready", flush=True)
    while not stop:
        time.sleep(POLL_S)
        start_s, cpu = time.monotonic(), engine_cpu_s(pgid)
        span_s = time.monotonic() - last_s  # covers both readings, however long they took
        if span_s <= FRESH_S and cpu - last_cpu >= BUSY_FRACTION * span_s:
            os.killpg(pgid, signal.SIGKILL)
            killed_s = time.monotonic()
            break
        last_s, last_cpu = start_s, cpu
    print(json.dumps({"killed_s": killed_s}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
