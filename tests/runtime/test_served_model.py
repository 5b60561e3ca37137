"""The served model is asked of the servers when no name is given: one rule everywhere."""

from __future__ import annotations

import json

import pytest

from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.runtime.backends import Backend
from tailsieve.runtime.served_model import (
    check_served_model,
    resolve_served_model,
    served_models,
)
from tailsieve.runtime.stub import StubTransport


def fake_servers(routes: dict[str, tuple[int, object]]):  # type: ignore[no-untyped-def]
    asked: list[str] = []

    async def get(url: str) -> tuple[int, str]:
        asked.append(url)
        if url not in routes:
            return 404, "not found"
        status, body = routes[url]
        return status, body if isinstance(body, str) else json.dumps(body)

    return get, asked


def models(*ids: str) -> dict[str, object]:
    return {"object": "list", "data": [{"id": i, "object": "model"} for i in ids]}


async def test_one_model_across_endpoints_is_used() -> None:
    get, _ = fake_servers({
        "http://a/v1/models": (200, models("tiny")),
        "http://b/v1/models": (200, models("tiny")),
    })
    assert await resolve_served_model(get, ["http://a", "http://b/"]) == "tiny"


async def test_several_models_are_an_error_listing_them() -> None:
    get, _ = fake_servers({
        "http://a/v1/models": (200, models("tiny", "tiny-lora")),
        "http://b/v1/models": (200, models("tiny")),
    })
    with pytest.raises(ConfigError) as err:
        await resolve_served_model(get, ["http://a", "http://b"])
    msg = str(err.value)
    assert "2 models" in msg and "tiny-lora" in msg and "http://a" in msg and "--model" in msg


async def test_different_models_on_different_endpoints_are_an_error() -> None:
    get, _ = fake_servers({
        "http://a/v1/models": (200, models("m1")),
        "http://b/v1/models": (200, models("m2")),
    })
    with pytest.raises(ConfigError, match=r"m1.*m2"):
        await resolve_served_model(get, ["http://a", "http://b"])


async def test_sglang_asks_get_model_info_first() -> None:
    get, asked = fake_servers({
        "http://s/get_model_info": (200, {"model_path": "Qwen/Qwen2.5-0.5B", "is_generation": True}),
        "http://s/v1/models": (200, models("other")),
    })
    assert await resolve_served_model(get, ["http://s"], Backend.SGLANG) == "Qwen/Qwen2.5-0.5B"
    assert asked == ["http://s/get_model_info"]


async def test_falls_back_to_the_other_listing() -> None:
    get, asked = fake_servers({"http://s/get_model_info": (200, {"model_path": "m"})})
    assert await served_models(get, "http://s", Backend.VLLM) == ("m",)
    assert asked == ["http://s/v1/models", "http://s/get_model_info"]


async def test_no_listing_says_what_was_tried() -> None:
    get, _ = fake_servers({"http://x/v1/models": (200, {"data": []})})
    with pytest.raises(ConfigError, match=r"no model listed.*HTTP 404.*--model"):
        await resolve_served_model(get, ["http://x"])


async def test_unreachable_endpoint_is_a_replica_error() -> None:
    async def get(url: str) -> tuple[int, str]:
        raise ReplicaError(f"cannot reach {url}")

    with pytest.raises(ReplicaError, match="cannot reach http://x/v1/models"):
        await resolve_served_model(get, ["http://x"])


async def test_executor_resolves_once_from_the_stub() -> None:
    from tailsieve.runtime.attempt import ExecutorConfig
    from tailsieve.runtime.executor import LiveExecutor

    stub = StubTransport(lambda pid, i: 5)
    ex = LiveExecutor(["http://r0", "http://r1"], ExecutorConfig(), transport=stub)
    assert ex.config.model is None
    assert await ex.resolve_model() == "stub" and ex.config.model == "stub"
    stub.served_models = ("changed",)
    assert await ex.resolve_model() == "stub"


async def test_a_given_model_is_checked_against_each_replica_and_the_error_names_it() -> None:
    get, _ = fake_servers({
        "http://a/v1/models": (200, models("tiny")),
        "http://b/v1/models": (200, models("other")),
    })
    with pytest.raises(ConfigError, match=r"'tiny' is not served by replica 1 \(http://b, "
                                          r"serves other\);"):
        await check_served_model(get, ["http://a", "http://b/"], "tiny")
    with pytest.raises(ConfigError, match=r"by replica 0 \(http://a, serves tiny\) nor "
                                          r"replica 1 \(http://b, serves other\);"):
        await check_served_model(get, ["http://a", "http://b"], "wrong")


async def test_a_replica_listing_no_model_takes_the_name_on_trust() -> None:
    get, _ = fake_servers({"http://a/v1/models": (200, models("tiny"))})
    await check_served_model(get, ["http://a", "http://silent"], "tiny")
