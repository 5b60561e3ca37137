"""The proxy tests' stub set-up: a proxy over in-memory stub replicas (the deterministic
``StubModel``: a turn generated in pieces on any replicas equals the turn generated in one go)
with a character tokenizer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tailsieve.runtime.proxy import ProxyConfig, RoutingProxy, ServedModel
from tailsieve.runtime.sessions import GatewayConfig
from tailsieve.runtime.stub import StubModel, StubPieceRunner

STUB_MODEL = "stub"
STUB_LEN = 4096


class CharTokenizer:
    """Text as its characters' code points; chat messages as ``<role>content`` then
    ``<assistant>`` (a stand-in chat template)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def tokenize(self, body: Mapping[str, Any]) -> tuple[int, ...]:
        self.calls.append(dict(body))
        if "messages" in body:
            text = "".join(f"<{m['role']}>{m.get('content') or ''}" for m in body["messages"])
            text += "<assistant>" if body.get("add_generation_prompt", True) else ""
        else:
            text = str(body["prompt"])
        return tuple(ord(c) for c in text)


def char_ids(text: str) -> list[int]:
    return [ord(c) for c in text]


def expected(prompt: list[int], max_tokens: int, model: StubModel | None = None,
             ) -> tuple[list[int], str]:
    """What one uninterrupted request generates on the stub."""
    return (model or StubModel()).generate(prompt, max_tokens)


def stub_text(ids: list[int]) -> str:
    return "".join(f"<{t}>" for t in ids)


def stub_logprob(t: int) -> float:
    return -((t % 7) + 1) / 10


async def stub_proxy(num_replicas: int = 2, piece_tokens: int = 8, moves: bool = True,
                     runner: StubPieceRunner | None = None, **cfg: Any) -> RoutingProxy:
    """A started proxy over stub replicas (close it with ``aclose``)."""
    runner = runner or StubPieceRunner(num_replicas)
    gw = GatewayConfig(piece_tokens=piece_tokens, moves=moves, profile="cpu",
                       no_replica_timeout_s=cfg.pop("no_replica_timeout_s", 60.0),
                       probe_interval_s=0.05)
    config = ProxyConfig(endpoints=tuple(f"http://stub-{i}" for i in range(num_replicas)),
                         gateway=gw, **cfg)
    proxy = RoutingProxy(config, runner=runner, tokenizer=CharTokenizer(),
                         served=ServedModel(STUB_MODEL, STUB_LEN))
    await proxy.__aenter__()
    await proxy.start()
    return proxy


def long_prompt(text: str, min_tokens: int, max_tokens: int = 4096) -> list[int]:
    """``text`` (plus a suffix where needed) as ids whose stub answer runs at least
    ``min_tokens`` tokens."""
    for k in range(10_000):
        ids = char_ids(text if k == 0 else f"{text} #{k}")
        if len(expected(ids, max_tokens)[0]) >= min_tokens:
            return ids
    raise AssertionError(f"no prompt near {text!r} runs {min_tokens} tokens")
