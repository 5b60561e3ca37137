"""Which model the replicas serve, asked of the servers: the one rule every command uses when
``--model`` is not given.

vLLM lists its models at ``GET /v1/models`` (``ServedModels.card``), SGLang answers
``GET /get_model_info`` and, in recent versions, ``/v1/models`` too. Exactly one model across
the replicas is used; several are a ``ConfigError`` that lists them, so a run never talks to a
model nobody chose. Asking needs only an HTTP GET (``Get``): ``HttpPieceRunner.models`` asks over
the runner's transport, ``resolve_served_model`` over one of its own.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.runtime.engine.backends import Backend
from tailsieve.runtime.engine.lean_http import LeanTransport
from tailsieve.runtime.engine.transport import Transport
from tailsieve.runtime.tasks import gather_all

OPENAI_MODELS = "/v1/models"
SGLANG_MODEL_INFO = "/get_model_info"

Get = Callable[[str], Awaitable[tuple[int, str]]]
"""``url`` -> the HTTP status and body of a ``GET`` of it (an ``OSError`` when unreachable)."""


@dataclass(frozen=True, slots=True)
class ModelCard:
    """A server's ``GET /v1/models`` answer: its first model's id, context limit
    (``max_model_len``) and weights directory (``root``), and the answer as it came."""

    name: str
    max_model_len: int | None
    root: str | None
    raw: dict[str, Any]


class ServedModels:
    """The models ``endpoints[replica]`` (base URLs) serve on ``backend``, asked by ``get``;
    a replica that cannot be reached is a ``ReplicaError``. ``endpoints`` is read at each
    question, not copied: the runner's own list, so an address its owner moves is asked there."""

    def __init__(self, endpoints: Sequence[str], backend: Backend | str, get: Get) -> None:
        self.endpoints = endpoints
        self.backend = Backend(backend)
        self._get = get

    async def card(self, replica: int) -> ModelCard | None:
        """``replica``'s ``GET /v1/models`` (None: no HTTP 200 listing a model)."""
        status, body = await self._ask(replica, OPENAI_MODELS)
        data = _json_object(body) if status == 200 else None
        rows = data.get("data") if data is not None else None
        row = rows[0] if isinstance(rows, list) and rows and isinstance(rows[0], dict) else None
        if data is None or row is None or not row.get("id"):
            return None
        mml, root = row.get("max_model_len"), row.get("root")
        return ModelCard(str(row["id"]), mml if isinstance(mml, int) else None,
                         str(root) if root else None, data)

    async def listed(self, replica: int) -> tuple[str, ...]:
        """The model ids ``replica`` serves: the backend's own listing first (SGLang:
        ``/get_model_info``; otherwise ``/v1/models``), then the other. ``ConfigError`` when
        neither names a model."""
        sglang = self.backend is Backend.SGLANG
        tried = []
        for path in (SGLANG_MODEL_INFO, OPENAI_MODELS) if sglang else (OPENAI_MODELS,
                                                                       SGLANG_MODEL_INFO):
            status, body = await self._ask(replica, path)
            ids = _model_ids(path, body) if status == 200 else ()
            if ids:
                return ids
            tried.append(f"{path}: HTTP {status}" if status != 200 else f"{path}: no model listed")
        raise ConfigError(f"cannot tell which model {self._url(replica)} serves "
                          f"({'; '.join(tried)}); pass --model NAME")

    async def one(self, replicas: Sequence[int] | None = None) -> str:
        """The one model ``replicas`` (default: all) serve; ``ConfigError`` listing them when
        they serve several."""
        rs = list(range(len(self.endpoints)) if replicas is None else replicas)
        per = await gather_all(*(self.listed(r) for r in rs))
        return one_model([(self._url(r), ids) for r, ids in zip(rs, per, strict=True)])

    async def check(self, name: str) -> None:
        """``ConfigError`` when a replica lists its models and ``name`` is not among them; the
        message names that replica by its index and URL. A replica that lists nothing (or
        cannot be reached) is not judged: the name is then taken on trust."""

        async def listing(r: int) -> tuple[str, ...]:
            try:
                return await self.listed(r)
            except (ConfigError, ReplicaError):
                return ()

        per = await asyncio.gather(*(listing(r) for r in range(len(self.endpoints))))
        bad = [(i, self._url(i), ids) for i, ids in enumerate(per)
               if ids and name not in ids]
        if not bad:
            return
        named = " nor ".join(f"replica {i} ({e}, serves {', '.join(ids)})" for i, e, ids in bad[:3])
        more = f" nor {len(bad) - 3} more" if len(bad) > 3 else ""
        raise ConfigError(f"--model {name!r} is not served by {named}{more}; pass a served "
                          "name, or leave --model out to use the one the replicas serve")

    def _url(self, replica: int) -> str:
        return self.endpoints[replica].rstrip("/")

    async def _ask(self, replica: int, path: str) -> tuple[int, str]:
        if not 0 <= replica < len(self.endpoints):
            raise ConfigError(f"replica {replica} out of range (0..{len(self.endpoints) - 1})")
        url = self._url(replica) + path
        try:
            return await self._get(url)
        except OSError as exc:
            raise ReplicaError(f"cannot reach {url}: {exc}") from None


def one_model(listings: Sequence[tuple[str, tuple[str, ...]]]) -> str:
    """The one model the ``(endpoint, ids)`` listings name; ``ConfigError`` listing them if
    several."""
    names = sorted({n for _, ids in listings for n in ids})
    if len(names) == 1:
        return names[0]
    listing = "; ".join(f"{e}: {', '.join(ids)}" for e, ids in listings)
    raise ConfigError(f"the servers serve {len(names)} models ({listing}); choose one with "
                      "--model NAME")


def _model_ids(path: str, body: str) -> tuple[str, ...]:
    """The model ids a ``/v1/models`` or ``/get_model_info`` answer names."""
    data = _json_object(body)
    if data is None:
        return ()
    if path == SGLANG_MODEL_INFO:
        name = data.get("served_model_name") or data.get("model_path")
        return (str(name),) if name else ()
    rows = data.get("data")
    if not isinstance(rows, list):
        return ()
    return tuple(str(r["id"]) for r in rows if isinstance(r, dict) and r.get("id"))


def _json_object(body: str) -> dict[str, Any] | None:
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


async def resolve_served_model(endpoints: Sequence[str], backend: Backend | str = Backend.VLLM,
                               transport: Transport | None = None,
                               timeout_s: float = 10.0) -> str:
    """The one model served by all ``endpoints`` (``ServedModels.one``), asked over
    ``transport`` (default: a new one, closed after) within ``timeout_s`` per request."""
    if not endpoints:
        raise ConfigError("resolve_served_model needs at least one endpoint")
    t = transport or LeanTransport()
    try:
        return await ServedModels(endpoints, backend, lambda url: t.get(url, timeout_s)).one()
    finally:
        if transport is None:
            await t.aclose()
