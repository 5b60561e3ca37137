"""``RayPieceRunner``: the session gateway's pieces sent to verl's server actors over Ray.

Each piece is one ``handle.generate.remote(request_id, prompt_ids, sampling_params)`` on the
replica's verl server actor (vLLM or SGLang), with the piece's token cap as ``max_tokens``.
The server's ``TokenOutput`` becomes the gateway's ``PieceOutput``, and rides with it as its
``detail`` into the turn's chain (``TurnResult.chain``), over which the router builds verl's
answer (``token_output.verl_output``); verl's other ``generate`` keywords come with each piece
(``PieceRequest.engine_args``).

Finish reasons: SGLang reports ``stop`` / ``length`` / ``abort``. vLLM reports a stop and a cut
at ``max_tokens`` alike (``completed``): a piece shorter than its cap stopped; one exactly at
its cap stopped if its last token is a stop id of the turn (``ServerFacts.stop_ids``), else it
was cut. A piece the server aborted (verl's weight sync, a server leaving the pool) ends the
turn with ``TurnAbortedError``: the router returns the tokens so far marked ``aborted``, as
the server would have, and verl's client decides (resume, or drop).

Errors: a dead actor (``RayActorError``) or a server whose engine or backend is gone
(``EngineDeadError``, a connection error) is ``ReplicaDownError`` (the gateway continues the
turn elsewhere); any other exception the server raised is ``RequestError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError

from tailsieve.errors import ReplicaError
from tailsieve.integrations.verl.server_facts import ServerFacts
from tailsieve.runtime.engine.transport import ReplicaDownError, RequestError
from tailsieve.runtime.sessions import PieceOutput, PieceRequest

log = logging.getLogger(__name__)

ABORT_REASONS = ("aborted", "abort")
DOWN_CAUSES = ("EngineDeadError", "EngineGenerateError")  # the engine under the actor died
PROBE_TIMEOUT_S = 5.0


class TurnAbortedError(ReplicaError):
    """The server aborted the running piece: the turn ends with the tokens it has (the
    aborted piece's ``TokenOutput``: ``output``)."""

    def __init__(self, message: str, output: Any = None) -> None:
        super().__init__(message)
        self.output = output


class RayPieceRunner:
    """Pieces to verl server actor handles: ``handles[replica]`` (a list the caller keeps
    current; ``None``: no server in that slot). ``facts()`` gives the pool's ``ServerFacts``."""

    def __init__(self, handles: list[Any | None], facts: Callable[[], ServerFacts],
                 request_timeout_s: float | None = 3600.0) -> None:
        self.handles = handles
        self._facts = facts
        self._timeout_s = request_timeout_s

    async def run_piece(self, replica: int, piece: PieceRequest) -> PieceOutput:
        """Generate ``piece`` on the server in slot ``replica`` (module docstring)."""
        handle = self.handles[replica]
        if handle is None:
            raise ReplicaDownError(f"replica slot {replica} has no server (removed)")
        sampling = verl_sampling(piece)
        ref = handle.generate.remote(
            request_id=piece.request_id, prompt_ids=list(piece.prompt_ids),
            sampling_params=sampling, **(piece.engine_args or {}))
        try:
            out = await asyncio.wait_for(_await(ref), self._timeout_s)
        except TimeoutError:
            _cancel(ref)
            raise ReplicaDownError(f"replica slot {replica}: piece {piece.request_id} ran "
                                   f"past {self._timeout_s} s") from None
        except asyncio.CancelledError:
            _cancel(ref)
            raise
        except (RayActorError, RayTaskError) as exc:
            raise ray_fault(replica, exc) from exc
        reason = piece_finish(out, piece.max_tokens, self._facts().stop_ids(sampling))
        if reason == "abort":
            raise TurnAbortedError(f"replica slot {replica} aborted piece {piece.request_id}",
                                   out)
        return PieceOutput(
            token_ids=tuple(map(int, out.token_ids)),
            finish_reason=reason,
            logprobs=None if out.log_probs is None else tuple(float(x) for x in out.log_probs),
            num_cached_tokens=_cached(out),
            detail=out,
        )

    async def probe(self, replica: int) -> bool:
        """The slot's server actor answers (a removed slot never does)."""
        handle = self.handles[replica]
        if handle is None:
            return False
        try:
            await asyncio.wait_for(_await(handle.get_server_address.remote()), PROBE_TIMEOUT_S)
        except Exception:
            return False
        return True


def verl_sampling(piece: PieceRequest) -> dict[str, Any]:
    """The piece's sampling as verl's server takes it (``logprobs`` is a flag there)."""
    sp = piece.sampling_dict()
    sp["logprobs"] = sp.pop("logprobs", None) is not None
    return sp


def piece_finish(out: Any, cap: int, stops: frozenset[int] | None) -> str:
    """``stop`` / ``length`` / ``abort`` of a piece from verl's ``TokenOutput``."""
    reason = out.stop_reason
    if reason in ABORT_REASONS:
        return "abort"
    if reason in ("stop", "length"):
        return str(reason)
    ids = out.token_ids
    if len(ids) < cap:
        return "stop"
    return "stop" if stops is not None and ids and int(ids[-1]) in stops else "length"


async def _await(ref: Any) -> Any:
    return await ref


def _cancel(ref: Any) -> None:
    with contextlib.suppress(Exception):
        ray.cancel(ref)


def _cause(exc: RayTaskError) -> str:
    cause = getattr(exc, "cause", None)
    return f"{type(cause).__name__}: {cause}" if cause is not None else str(exc).splitlines()[0]


def ray_fault(replica: int, exc: BaseException) -> BaseException:
    """What a Ray call's exception means (``runtime.engine.faults``): a dead actor, or an engine or
    backend gone under it, is ``ReplicaDownError``; any other error the server raised is a
    ``RequestError``; anything else is ``exc`` itself."""
    if isinstance(exc, RayActorError):
        return ReplicaDownError(f"replica slot {replica}: server actor gone: {exc}")
    if isinstance(exc, RayTaskError):
        if _engine_gone(exc):
            return ReplicaDownError(f"replica slot {replica}: {_cause(exc)}")
        return RequestError(f"replica slot {replica}: generate failed: {_cause(exc)}",
                            retryable=False)
    return exc


def _engine_gone(exc: RayTaskError) -> bool:
    cause = getattr(exc, "cause", None)
    if cause is None:
        return False
    return isinstance(cause, ConnectionError | OSError) or type(cause).__name__ in DOWN_CAUSES \
        or "ClientConnectorError" in type(cause).__name__ \
        or "ServerDisconnectedError" in type(cause).__name__


def _cached(out: Any) -> int | None:
    v = (out.extra_fields or {}).get("num_cached_tokens")
    return None if v is None else int(v)
