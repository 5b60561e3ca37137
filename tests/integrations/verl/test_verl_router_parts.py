"""The verl router plug-in's parts without Ray: its YAML, the servers' budget and stop rules,
verl's ``TokenOutput`` as a view over a chain of pieces, sessions, slots and the whole-turn reasons."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="verl is not installed (bash scripts/setup_verl.sh)")

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from verl.workers.rollout.replica import TokenOutput
from verl.workers.rollout.router import _load_router_yaml, _resolve_router_class

from tailsieve.errors import ConfigError
from tailsieve.integrations.verl.ray_runner import piece_finish
from tailsieve.integrations.verl.router_config import ROUTER_CLASS, VerlRouterConfig
from tailsieve.integrations.verl.server_facts import ServerFacts, facts_from_rollout_config
from tailsieve.integrations.verl.slots import ServerSlots
from tailsieve.integrations.verl.token_output import piece_of, verl_output
from tailsieve.integrations.verl.turn_handle import TurnHandle, whole_reason
from tailsieve.session import SessionPolicy

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "verl" / "tailsieve_router.yaml"


def test_example_yaml_loads_as_verl_loads_it() -> None:
    """verl's own loader reads the example, resolves its class, and every key parses."""
    raw = _load_router_yaml(str(EXAMPLE))
    assert raw["router_class"] == ROUTER_CLASS
    import ray.actor

    cls = _resolve_router_class(raw["router_class"])
    assert isinstance(cls, ray.actor.ActorClass)  # verl builds it with .remote(servers, yaml)
    cfg = VerlRouterConfig.from_yaml(raw)
    assert cfg == VerlRouterConfig()  # the example spells out the defaults


def test_yaml_options_and_errors() -> None:
    cfg = VerlRouterConfig.from_yaml({"router_class": ROUTER_CLASS, "policy": "verl-sticky",
                                      "moves": "false", "piece_tokens": 64,
                                      "session": {"move_margin": 3.0},
                                      "balance": {"interval_s": 0.5},
                                      "policy_options": {}, "eos_token_ids": [2, 7]})
    assert cfg.policy is SessionPolicy.VERL and not cfg.moves
    assert cfg.session.move_margin == 3.0 and cfg.balance.interval_s == 0.5
    g, why = cfg.gateway_config()
    assert g.policy == "verl-sticky" and g.piece_tokens == 64
    assert g.moves_off_reason == "moves=False" and why is None
    g, why = VerlRouterConfig().gateway_config(stop_ids_known=False)
    assert not g.moves and "eos_token_ids" in str(why)
    assert cfg.eos_token_ids == (2, 7)
    assert cfg.shards == 1 and VerlRouterConfig.from_yaml({"shards": 4}).shards == 4
    for bad, word in [({"bogus": 1}, "bogus"), ({"policy": "oracle"}, "oracle"),
                      ({"policy": "nope"}, "nope"), ({"session": {"x": 1}}, "x"),
                      ({"piece_tokens": 0}, "piece_tokens"), ({"balance": 3}, "balance"),
                      ({"eos_token_ids": ["a"]}, "eos_token_ids"), ({"shards": 0}, "shards"),
                      ({"shards": "two"}, "shards")]:
        with pytest.raises(ConfigError, match=word):
            VerlRouterConfig.from_yaml(bad)
    assert VerlRouterConfig().num_slots(3) == 64
    assert VerlRouterConfig(max_servers=4).num_slots(3) == 4
    with pytest.raises(ConfigError, match="max_servers"):
        VerlRouterConfig(max_servers=2).num_slots(3)


def test_budget_follows_the_vllm_server() -> None:
    """The default max_tokens of verl's vLLM server: min(R, P + R - len), clamped to the
    model's length; an explicit max_tokens / max_new_tokens wins."""
    f = facts_from_rollout_config({"name": "vllm", "prompt_length": 100,
                                   "response_length": 50, "max_model_len": 160}, None)
    assert f.budget(10, {}) == 50
    assert f.budget(120, {}) == 30  # 100 + 50 - 120
    assert f.budget(140, {"max_tokens": 40}) == 20  # the model's length: 160 - 140
    assert f.budget(10, {"max_new_tokens": 7}) == 7
    assert f.budget(159, {}) == 1
    assert ServerFacts(None, None, None).budget(10, {}) is None
    sg = facts_from_rollout_config({"name": "sglang", "prompt_length": 100,
                                    "response_length": 50, "max_model_len": 160}, None)
    assert sg.budget(140, {"max_tokens": 40}) == 19  # SGLang keeps one token free


def test_stop_rule_tells_a_stop_at_the_cap_from_a_cut() -> None:
    f = ServerFacts(10, 10, 100, eos_token_ids=frozenset({2}))
    assert f.stop_ids({}) == {2}
    assert f.stop_ids({"stop_token_ids": [9]}) == {2, 9}
    assert f.stop_ids({"ignore_eos": True, "stop_token_ids": [9]}) == {9}
    assert ServerFacts(10, 10, 100).stop_ids({}) is None

    def out(ids: list[int], reason: str = "completed") -> TokenOutput:
        return TokenOutput(token_ids=ids, stop_reason=reason)

    assert piece_finish(out([5, 6]), 4, {2}) == "stop"  # short of the cap: it stopped
    assert piece_finish(out([5, 6, 7, 2]), 4, {2}) == "stop"  # at the cap on EOS
    assert piece_finish(out([5, 6, 7, 8]), 4, {2}) == "length"  # cut at the cap
    assert piece_finish(out([5, 6, 7, 2]), 4, None) == "length"
    assert piece_finish(out([5], "aborted"), 4, {2}) == "abort"
    assert piece_finish(out([5, 6, 7, 2], "length"), 4, {2}) == "length"  # SGLang says


@given(st.lists(st.tuples(st.lists(st.integers(0, 99), max_size=6), st.booleans()),
                min_size=1, max_size=6))
def test_the_view_reads_verl_s_fields_off_the_pieces(
        pieces: list[tuple[list[int], bool]]) -> None:
    """Token ids and log-probs are the chain's join (``tests/runtime/execution/test_chain.py``); what
    only verl's server says is read off each piece's ``TokenOutput``."""
    outs = [TokenOutput(token_ids=ids, log_probs=[-0.1 * t for t in ids] if lp else None,
                        stop_reason="completed", num_preempted=1,
                        extra_fields={"global_steps": k, "num_cached_tokens": 10 + k})
            for k, (ids, lp) in enumerate(pieces)]
    j = verl_output([piece_of(o) for o in outs])
    assert j.token_ids == [t for ids, _ in pieces for t in ids]
    assert j.num_preempted == len(pieces) and j.stop_reason == "completed"
    assert j.extra_fields["num_cached_tokens"] == 10
    assert (j.extra_fields["min_global_steps"], j.extra_fields["max_global_steps"]) == (
        0, len(pieces) - 1)
    assert verl_output([piece_of(o) for o in outs], aborted=True).stop_reason == "aborted"


def test_join_of_routed_experts_as_verl_resumes() -> None:
    a = np.arange(5 * 2).reshape(5, 2)  # prompt 3 + 2 tokens
    b = np.arange(100, 100 + 7 * 2).reshape(7, 2)  # prompt 5 + 2 tokens
    outs = [TokenOutput(token_ids=[1, 2], routed_experts=a, stop_reason="completed"),
            TokenOutput(token_ids=[3, 4], routed_experts=b, stop_reason="completed")]
    j = verl_output([piece_of(o) for o in outs])
    assert np.array_equal(j.routed_experts, np.concatenate([a, b[-2:]]))


def test_slots_keep_a_server_on_its_slot() -> None:
    s = ServerSlots(3)
    assert s.add({"a": 1, "b": 2}) == [0, 1]
    assert s.remove(["a", "zz"]) == [0]
    assert s.active() == ["b"]
    assert s.add({"c": 3, "a": 4}) == [2, 0]
    assert s.active() == ["a", "b", "c"] and s.handles[0] == 4
    with pytest.raises(ConfigError, match="max_servers"):
        s.add({"d": 5})


def test_whole_turn_reasons() -> None:
    call: dict[str, Any] = {"prompt_ids": [1], "image_data": None}
    assert whole_reason(call, {}, 10) is None
    assert "multimodal" in str(whole_reason({**call, "image_data": [object()]}, {}, 10))
    assert "prompt_logprobs" in str(whole_reason(call, {"prompt_logprobs": 0}, 10))
    assert "stop strings" in str(whole_reason(call, {"stop": ["x"]}, 10))
    assert "n > 1" in str(whole_reason(call, {"n": 2}, 10))
    assert "max_tokens unknown" in str(whole_reason(call, {}, None))


def test_turn_handle_forwards_to_the_router() -> None:
    class Method:
        def __init__(self) -> None:
            self.got: tuple[Any, ...] = ()

        def remote(self, *args: Any, **kwargs: Any) -> str:
            self.got = (args, kwargs)
            return "ref"

    class Router:
        generate_turn = Method()

    h = TurnHandle(Router(), "traj-1")
    assert h.generate.remote([1, 2], {"t": 1}, request_id="r") == "ref"
    assert Router.generate_turn.got == (("traj-1",), {"prompt_ids": [1, 2],
                                                      "sampling_params": {"t": 1},
                                                      "request_id": "r"})
