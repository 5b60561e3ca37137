"""The served model is asked of the servers by the engine client when no name is given: one
rule everywhere (``HttpPieceRunner.resolve_model``, ``ServedModels``)."""

from __future__ import annotations

import json

import pytest

from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.runtime.engine.backends import Backend
from tailsieve.runtime.engine.http_runner import HttpPieceRunner
from tailsieve.runtime.engine.served_models import ServedModels, resolve_served_model
from tailsieve.runtime.stub import StubTransport


class FakeServers:
    """A ``Transport`` whose GETs answer from ``routes`` (404 elsewhere); ``asked``: the URLs."""

    def __init__(self, routes: dict[str, tuple[int, object]]) -> None:
        self.routes = routes
        self.asked: list[str] = []

    async def get(self, url: str, timeout_s: float | None) -> tuple[int, str]:
        self.asked.append(url)
        if url not in self.routes:
            return 404, "not found"
        status, body = self.routes[url]
        return status, body if isinstance(body, str) else json.dumps(body)

    async def aclose(self) -> None:
        return None


def runner(routes: dict[str, tuple[int, object]], endpoints: list[str],
           backend: Backend = Backend.VLLM) -> tuple[HttpPieceRunner, FakeServers]:
    t = FakeServers(routes)
    return HttpPieceRunner(endpoints, backend, transport=t), t  # type: ignore[arg-type]


def models(*ids: str) -> dict[str, object]:
    return {"object": "list", "data": [{"id": i, "object": "model"} for i in ids]}


async def test_one_model_across_endpoints_is_used_and_kept() -> None:
    r, t = runner({"http://a/v1/models": (200, models("tiny")),
                   "http://b/v1/models": (200, models("tiny"))}, ["http://a", "http://b/"])
    assert await r.resolve_model() == "tiny" and r.model == "tiny"
    assert await r.resolve_model() == "tiny" and len(t.asked) == 2


async def test_several_models_are_an_error_listing_them() -> None:
    r, _ = runner({"http://a/v1/models": (200, models("tiny", "tiny-lora")),
                   "http://b/v1/models": (200, models("tiny"))}, ["http://a", "http://b"])
    with pytest.raises(ConfigError) as err:
        await r.resolve_model()
    msg = str(err.value)
    assert "2 models" in msg and "tiny-lora" in msg and "http://a" in msg and "--model" in msg


async def test_different_models_on_different_endpoints_are_an_error() -> None:
    r, _ = runner({"http://a/v1/models": (200, models("m1")),
                   "http://b/v1/models": (200, models("m2"))}, ["http://a", "http://b"])
    with pytest.raises(ConfigError, match=r"m1.*m2"):
        await r.resolve_model()


async def test_only_the_replicas_asked_are_judged() -> None:
    r, t = runner({"http://a/v1/models": (200, models("m1")),
                   "http://b/v1/models": (200, models("m2"))}, ["http://a", "http://b"])
    assert await r.resolve_model([1]) == "m2" and t.asked == ["http://b/v1/models"]


async def test_sglang_asks_get_model_info_first() -> None:
    r, t = runner({
        "http://s/get_model_info": (200, {"model_path": "Qwen/Qwen2.5-0.5B", "is_generation": True}),
        "http://s/v1/models": (200, models("other")),
    }, ["http://s"], Backend.SGLANG)
    assert await r.resolve_model() == "Qwen/Qwen2.5-0.5B"
    assert t.asked == ["http://s/get_model_info"]


async def test_vllm_falls_back_to_get_model_info() -> None:
    r, t = runner({"http://s/get_model_info": (200, {"model_path": "m"})}, ["http://s"])
    assert await r.models.listed(0) == ("m",)
    assert t.asked == ["http://s/v1/models", "http://s/get_model_info"]


async def test_no_model_listed_is_a_config_error() -> None:
    r, _ = runner({"http://x/v1/models": (200, {"data": []})}, ["http://x"])
    with pytest.raises(ConfigError, match="cannot tell which model http://x serves"):
        await r.resolve_model()


async def test_unreachable_endpoint_is_a_replica_error() -> None:
    class Refusing(FakeServers):
        async def get(self, url: str, timeout_s: float | None) -> tuple[int, str]:
            raise ConnectionRefusedError("refused")

    r = HttpPieceRunner(["http://x"], transport=Refusing({}))  # type: ignore[arg-type]
    with pytest.raises(ReplicaError, match="cannot reach http://x/v1/models"):
        await r.resolve_model()


async def test_resolve_served_model_asks_over_the_given_transport() -> None:
    t = FakeServers({"http://a/v1/models": (200, models("tiny"))})
    assert await resolve_served_model(["http://a"], transport=t) == "tiny"  # type: ignore[arg-type]


async def test_the_model_card_is_the_first_listed_model_with_its_limit_and_root() -> None:
    answer = {"data": [{"id": "tiny", "max_model_len": 2048, "root": "/models/tiny"},
                       {"id": "lora"}]}
    r, _ = runner({"http://a/v1/models": (200, answer)}, ["http://a", "http://b"])
    card = await r.models.card(0)
    assert card is not None and (card.name, card.max_model_len, card.root) == (
        "tiny", 2048, "/models/tiny") and card.raw == answer
    assert await r.models.card(1) is None  # HTTP 404


async def test_executor_resolves_once_from_the_stub() -> None:
    from tailsieve.runtime.step.executor import LiveExecutor
    from tailsieve.runtime.step.executor_config import ExecutorConfig

    stub = StubTransport(lambda pid, i: 5)
    ex = LiveExecutor(["http://r0", "http://r1"], ExecutorConfig(), transport=stub)
    assert ex.config.model is None
    assert await ex.resolve_model() == "stub" and ex.config.model == "stub"
    stub.served_models = ("changed",)
    assert await ex.resolve_model() == "stub"


async def test_a_given_model_is_checked_against_each_replica_and_the_error_names_it() -> None:
    r, _ = runner({"http://a/v1/models": (200, models("tiny")),
                   "http://b/v1/models": (200, models("other"))}, ["http://a", "http://b/"])
    with pytest.raises(ConfigError, match=r"'tiny' is not served by replica 1 \(http://b, "
                                          r"serves other\);"):
        await r.models.check("tiny")
    with pytest.raises(ConfigError, match=r"by replica 0 \(http://a, serves tiny\) nor "
                                          r"replica 1 \(http://b, serves other\);"):
        await r.models.check("wrong")


async def test_a_replica_listing_no_model_takes_the_name_on_trust() -> None:
    r, _ = runner({"http://a/v1/models": (200, models("tiny"))}, ["http://a", "http://silent"])
    await r.models.check("tiny")


async def test_served_models_asks_over_any_get_and_names_an_unreachable_url() -> None:
    asked: list[str] = []

    async def get(url: str) -> tuple[int, str]:
        asked.append(url)
        if url.startswith("http://down"):
            raise ConnectionRefusedError("refused")
        return 200, json.dumps({"served_model_name": "m"})

    m = ServedModels(["http://s/", "http://down"], Backend.SGLANG, get)
    assert await m.listed(0) == ("m",) and asked == ["http://s/get_model_info"]
    with pytest.raises(ReplicaError, match="cannot reach http://down/get_model_info"):
        await m.listed(1)
    with pytest.raises(ConfigError, match="replica 2 out of range"):
        await m.card(2)


async def test_a_replica_whose_address_moved_is_asked_at_its_new_address() -> None:
    asked: list[str] = []

    async def get(url: str) -> tuple[int, str]:
        asked.append(url)
        return 200, json.dumps(models("m"))

    endpoints = ["http://old:1"]
    m = ServedModels(endpoints, Backend.VLLM, get)
    endpoints[0] = "http://new:2/"  # as ``ReplicaSet.refresh_addresses`` moves a runner's replica
    assert await m.one() == "m" and asked == ["http://new:2/v1/models"]
