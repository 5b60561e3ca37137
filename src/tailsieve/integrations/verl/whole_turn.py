"""Turns the router places but does not cut into pieces: verl's call sent whole, verbatim.

A turn whose inputs a continuation cannot carry (multimodal data, ``prompt_logprobs`` of a
distillation teacher, stop strings, ``n > 1``, a budget the router cannot compute) is placed
by the same session router over the same book as every other turn, then verl's own
``generate`` call goes to that server unchanged and its ``TokenOutput`` comes back unchanged.
A server that dies under it, or hangs (the gateway's stall watch), is taken out and the turn
starts again from its prompt on another (nothing of it was delivered); an abort by the server
is returned as verl would see it.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Any

from tailsieve.integrations.verl.ray_runner import ray_fault
from tailsieve.runtime.engine.transport import ReplicaDownError
from tailsieve.runtime.sessions import SessionGateway
from tailsieve.runtime.sessions.parts import Placement

log = logging.getLogger(__name__)


async def run_whole(gw: SessionGateway, handles: list[Any | None], key: str,
                    group: Hashable | None, call: dict[str, Any],
                    max_tokens: int | None) -> tuple[Any, Placement]:
    """Place and run one turn as verl's call ``call``; its ``TokenOutput`` and placement."""
    prompt_len = len(call["prompt_ids"])
    _, d = await gw.request_turn(key, group, prompt_len, None, max_tokens)
    gw.book.start_turn(key, d.replica, gw.now())
    replica, out = d.replica, None
    try:
        while True:
            handle = handles[replica]
            try:
                if handle is None:
                    raise ReplicaDownError(f"replica slot {replica} left the pool")
                ref = handle.generate.remote(**call)
                out = await (ref if max_tokens is None  # unknown budget: no expected time
                             else gw.watched((key, "whole"), replica, prompt_len, max_tokens, ref))
                return out, d
            except Exception as exc:
                if not isinstance(ray_fault(replica, exc), ReplicaDownError):
                    raise  # the server answered: verl sees its error, as without the router
                log.warning("tailsieve router: slot %d failed under a whole turn (%s); "
                            "starting it again elsewhere", replica, exc)
                replica = await gw.fail_over(key, replica, exc)
    finally:
        gw.turn_ended(key, len(out.token_ids) if out is not None else 0, replica)
