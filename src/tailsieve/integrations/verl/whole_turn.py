"""Turns the router places but does not cut into pieces: verl's call sent whole, verbatim.

A turn whose inputs a continuation cannot carry (multimodal data, ``prompt_logprobs`` of a
distillation teacher, stop strings, ``n > 1``, a budget the router cannot compute) is placed
by the same session router over the same book as every other turn, then verl's own
``generate`` call goes to that server unchanged and its ``TokenOutput`` comes back unchanged.
A server that dies under it, or hangs (the gateway's stall watch), is taken out and the turn
starts again from its prompt on another (nothing of it was delivered); an abort by the server is returned as verl would see it.
"""

from __future__ import annotations

import logging
from typing import Any

from ray.exceptions import RayActorError

from tailsieve.errors import ReplicaError
from tailsieve.runtime.sessions import SessionGateway
from tailsieve.runtime.sessions.parts import Placement

log = logging.getLogger(__name__)


async def place(gw: SessionGateway, key: str, group: int | None, prompt_len: int,
                max_tokens: int | None) -> Placement:
    """The gateway's router decides where the turn runs (a replica out of service never),
    as ``SessionGateway`` places its own turns."""
    req = gw.book.request(key, group, prompt_len, None, max_tokens)
    await gw.health.wait_any(gw.config.no_replica_timeout_s)
    views = gw.book.views(gw.now())
    healthy = gw.healthy()
    home = req.home
    d = Placement.of(gw.router.choose(req, views, gw.elapsed()))
    if not healthy[d.replica]:
        d = gw.parts.fallback(req, views, healthy, "home-down" if d.replica == home
                              else "fallback")
    return d


async def run_whole(gw: SessionGateway, handles: list[Any | None], key: str,
                    group: int | None, call: dict[str, Any],
                    max_tokens: int | None) -> tuple[Any, Placement]:
    """Place and run one turn as verl's call ``call``; its ``TokenOutput`` and placement."""
    prompt_len = len(call["prompt_ids"])
    d = await place(gw, key, group, prompt_len, max_tokens)
    gw.book.start_turn(key, d.replica, gw.now())
    replica, out = d.replica, None
    try:
        while True:
            handle = handles[replica]
            try:
                if handle is None:
                    raise ReplicaError(f"replica slot {replica} left the pool")
                ref = handle.generate.remote(**call)
                out = await (ref if max_tokens is None  # unknown budget: no expected time
                             else gw.watched((key, "whole"), replica, prompt_len, max_tokens, ref))
                return out, d
            except (RayActorError, ReplicaError) as exc:
                log.warning("tailsieve router: slot %d failed under a whole turn (%s); "
                            "starting it again elsewhere", replica, exc)
                gw.health.down(replica, exc)
                await gw.health.wait_any(gw.config.no_replica_timeout_s)
                replica = gw.parts.least_loaded(gw.book.views(gw.now()), gw.healthy())
                gw.book.move_turn(key, replica, gw.now())
    finally:
        gw.book.end_turn(key, len(out.token_ids) if out is not None else 0, gw.now())
