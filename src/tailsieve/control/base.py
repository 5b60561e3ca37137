"""The controller interface the step protocol calls (defined in ``core.controller``, beside the
protocol that calls it; named here too, where the controllers live)."""

from tailsieve.core.controller import Controller, ControlTargets

__all__ = ["ControlTargets", "Controller"]
