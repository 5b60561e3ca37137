"""The session gateway's steps: whether running turns move, step by step.

The balance gate (``control.balance_gate``), fed at each step's end with the step's time
against the caller's yardstick, says whether the next step moves turns: a step it does not
balance keeps TailSieve's sessions home and runs every turn as one piece (as in the agentic
simulator). Moves are also off where the config turns them off (``moves_off_reason``) or the
mid-turn checks crashed (``MidTurnMoves.crash``). Each step prices moves over the last one's
time.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from tailsieve.control.balance_gate import BalanceGate
from tailsieve.runtime.sessions.config import GatewayConfig
from tailsieve.runtime.sessions.gateway_moves import MidTurnMoves
from tailsieve.runtime.sessions.parts import GatewayParts
from tailsieve.runtime.tasks import BackgroundTask
from tailsieve.session.routers import TailSieveRouter

log = logging.getLogger(__name__)


class GatewaySteps:
    """The gate's step state over ``moves`` and ``parts``' router (``SessionGateway``'s step
    hooks)."""

    def __init__(self, config: GatewayConfig, parts: GatewayParts, moves: MidTurnMoves) -> None:
        self.config = config
        self.parts = parts
        self.moves = moves
        self.gate = BalanceGate()
        self.step_balanced = True
        self.last_step_s = 0.0  # the last step's time (0: none yet)
        self._task = BackgroundTask("session-rebalancer")

    @property
    def off_reason(self) -> str | None:
        """Why running turns do not move now (None: they do)."""
        why = self.config.moves_off_reason or self.moves.crash
        if why is None and not self.step_balanced:
            st = self.gate.state
            return ("the balance gate: steps with mid-turn moves measured slower than steps "
                    f"without ({len(st.balanced)} / {len(st.round_robin)} steps)")
        return why

    def start(self) -> None:
        """Run the mid-turn checks (unless the config turns moves off)."""
        why = self.config.moves_off_reason
        if why is None:
            self._task.start(self.moves.run)
        else:
            log.info("session gateway: running turns do not move: %s", why)

    async def aclose(self) -> None:
        await self._task.aclose()

    def begin_step(self) -> None:
        """A step begins: the gate says whether it moves turns; moves are priced over the
        last step's time."""
        self.step_balanced = not self.config.gate or self.gate.balances_next()
        last = self.last_step_s
        self.moves.settings = replace(self.config.balance, expected_step_s=last)
        router = self.parts.router
        if isinstance(router, TailSieveRouter):
            base = self.parts.settings
            router.settings = replace(
                base, moves=base.moves and self.step_balanced, expected_step_s=last)

    def set_step_balanced(self, balanced: bool) -> None:
        """``SessionGateway.set_step_balanced``."""
        self.step_balanced = not self.config.gate or balanced
        moves = self.parts.settings.moves and self.step_balanced
        router = self.parts.router
        if isinstance(router, TailSieveRouter) and router.settings.moves != moves:
            router.settings = replace(router.settings, moves=moves)  # once a change

    def end_step(self, observed_s: float, predicted_s: float) -> str:
        """``SessionGateway.end_step``."""
        self.last_step_s = max(observed_s, 0.0)
        self.moves.refit_soon()  # between steps, off the pieces' path (begin_step's cheap)
        if self.config.moves_off_reason is not None or self.moves.crash is not None:
            return ""
        if not (predicted_s > 0 and observed_s > 0):
            return ""
        note = self.gate.observe(self.step_balanced, observed_s / predicted_s)
        if note:
            log.info("session gateway: %s", note)
        return note
