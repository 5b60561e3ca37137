"""Which model the replicas serve, asked of the servers themselves: the one rule every command
uses when ``--model`` is not given.

vLLM and other OpenAI-compatible servers list their models at ``GET /v1/models``; SGLang answers
``GET /get_model_info`` (``model_path``) and, in recent versions, ``/v1/models`` too. Exactly one
model across all endpoints is used; several are an error that lists them, so a run never talks
to a model nobody chose.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence

from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.runtime.backends import Backend

Getter = Callable[[str], Awaitable[tuple[int, str]]]  # GET url -> (status, body text)

OPENAI_MODELS = "/v1/models"
SGLANG_MODEL_INFO = "/get_model_info"


def _ids(path: str, body: str) -> tuple[str, ...]:
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        return ()
    if not isinstance(data, dict):
        return ()
    if path == SGLANG_MODEL_INFO:
        name = data.get("served_model_name") or data.get("model_path")
        return (str(name),) if name else ()
    rows = data.get("data")
    if not isinstance(rows, list):
        return ()
    return tuple(str(r["id"]) for r in rows if isinstance(r, dict) and r.get("id"))


async def served_models(get: Getter, endpoint: str, backend: Backend) -> tuple[str, ...]:
    """The model ids one endpoint serves: the backend's own listing first (SGLang:
    ``/get_model_info``; otherwise ``/v1/models``), then the other. Raises ``ConfigError`` when
    neither names a model (``ReplicaError`` propagates when the endpoint cannot be reached)."""
    base = endpoint.rstrip("/")
    paths = (
        (SGLANG_MODEL_INFO, OPENAI_MODELS)
        if backend is Backend.SGLANG
        else (OPENAI_MODELS, SGLANG_MODEL_INFO)
    )
    tried = []
    for path in paths:
        status, body = await get(base + path)
        ids = _ids(path, body) if status == 200 else ()
        if ids:
            return ids
        tried.append(f"{path}: HTTP {status}" if status != 200 else f"{path}: no model listed")
    raise ConfigError(
        f"cannot tell which model {base} serves ({'; '.join(tried)}); pass --model NAME"
    )


async def resolve_served_model(
    get: Getter, endpoints: Sequence[str], backend: Backend = Backend.VLLM
) -> str:
    """The one model served by all ``endpoints``; ``ConfigError`` listing them if several."""
    if not endpoints:
        raise ConfigError("need at least one endpoint to ask which model it serves")
    per = await asyncio.gather(*(served_models(get, e, backend) for e in endpoints))
    names = sorted({n for ids in per for n in ids})
    if len(names) == 1:
        return names[0]
    listing = "; ".join(f"{e.rstrip('/')}: {', '.join(ids)}" for e, ids in zip(endpoints, per, strict=True))
    raise ConfigError(
        f"the servers serve {len(names)} models ({listing}); choose one with --model NAME"
    )


def transport_getter(get: Callable[[str, float | None], Awaitable[tuple[int, str]]],
                     timeout_s: float | None = 10.0) -> Getter:
    """Adapt ``Transport.get(url, timeout_s)`` to a ``Getter``; unreachable replicas raise
    ``ReplicaError`` naming the URL."""

    async def one(url: str) -> tuple[int, str]:
        try:
            return await get(url, timeout_s)
        except ReplicaError:
            raise
        except OSError as exc:
            raise ReplicaError(f"cannot reach {url}: {exc}") from None

    return one


async def check_served_model(
    get: Getter, endpoints: Sequence[str], name: str, backend: Backend = Backend.VLLM
) -> None:
    """``ConfigError`` when an endpoint lists its models and ``name`` is not among them; the
    message names that replica by its index in ``endpoints`` and its URL. An endpoint that lists
    nothing (or cannot be reached) is not judged: the name is then taken on trust."""

    async def listing(e: str) -> tuple[str, ...]:
        try:
            return await served_models(get, e, backend)
        except (ConfigError, ReplicaError):
            return ()

    per = await asyncio.gather(*(listing(e) for e in endpoints))
    bad = [(i, e.rstrip("/"), ids) for i, (e, ids) in enumerate(zip(endpoints, per, strict=True))
           if ids and name not in ids]
    if not bad:
        return
    named = " nor ".join(f"replica {i} ({url}, serves {', '.join(ids)})" for i, url, ids in bad[:3])
    more = f" nor {len(bad) - 3} more" if len(bad) > 3 else ""
    raise ConfigError(
        f"--model {name!r} is not served by {named}{more}; pass a served name, or leave --model "
        "out to use the one the replicas serve"
    )
