"""``python live_serve.py TIME_SCALE serve ...``: ``tailsieve serve`` with its model-time timers
scaled for time-scaled emulators.

The gateway's mid-turn checks (``AGENTIC_BALANCE``: every 5 s, a 30 s horizon, 50 ms seams) are
in model seconds; in front of emulators that run ``TIME_SCALE`` real seconds per model second,
they are scaled by it, as ``bench_proxy_imbalance.py`` does in-process. Everything else is the
``tailsieve serve`` command line as given.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Any

import tailsieve.cli.serve_cmd as serve_cmd
from tailsieve.cli.main import main as tailsieve_main
from tailsieve.session.midturn import AGENTIC_BALANCE


def run(argv: list[str]) -> int:
    scale = float(argv[0])
    balance = replace(AGENTIC_BALANCE, interval_s=AGENTIC_BALANCE.interval_s * scale,
                      horizon_s=AGENTIC_BALANCE.horizon_s * scale,
                      seam_s=AGENTIC_BALANCE.seam_s * scale)
    made = serve_cmd.GatewayConfig

    def scaled(**kw: Any) -> Any:
        return made(**{"balance": balance, **kw})

    serve_cmd.GatewayConfig = scaled  # type: ignore[misc,assignment]
    return tailsieve_main(argv[1:])


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
