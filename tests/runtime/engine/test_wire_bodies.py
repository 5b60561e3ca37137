"""Request bodies and response parsing of the vLLM (completions, chat) and SGLang dialects."""

from __future__ import annotations

import pytest

from tailsieve.errors import ConfigError
from tailsieve.runtime.engine.backends import Backend, PromptInput, SamplingParams
from tailsieve.runtime.engine.transport import RequestError
from tailsieve.runtime.engine.wire_bodies import build_request, parse_response
from tailsieve.runtime.step.executor_config import ExecutorConfig
from tailsieve.runtime.step.rollout_config import RolloutConfig

SP = SamplingParams(
    max_tokens=64,
    temperature=0.7,
    top_p=0.9,
    top_k=20,
    presence_penalty=0.1,
    stop=("\n\n",),
    logprobs=1,
    extra={"repetition_penalty": 1.05},
)


def test_vllm_completion_request_replay() -> None:
    body = build_request(
        Backend.VLLM, "tiny", PromptInput("a", token_ids=(1, 2)), SP, 1, forced_tokens=9, seed=3
    )
    assert body["prompt"] == [1, 2] and body["n"] == 1 and body["seed"] == 3
    assert body["max_tokens"] == 9 and body["min_tokens"] == 9 and body["ignore_eos"] is True
    assert body["return_token_ids"] is True and body["logprobs"] == 1
    assert body["top_k"] == 20 and body["stop"] == ["\n\n"] and body["repetition_penalty"] == 1.05
    assert "stream" not in body


def test_stream_interval_rides_on_streamed_vllm_requests_only() -> None:
    p = PromptInput("a", token_ids=(1, 2))
    streamed = build_request(Backend.VLLM, "tiny", p, SP, 1, stream=True, stream_interval=16)
    assert streamed["stream"] is True and streamed["stream_interval"] == 16
    assert "stream_interval" not in build_request(Backend.VLLM, "tiny", p, SP, 1,
                                                  stream_interval=16)
    assert "stream_interval" not in build_request(Backend.VLLM, "tiny", p, SP, 1, stream=True,
                                                  stream_interval=1)
    ExecutorConfig(stream=True, stream_interval=16)
    with pytest.raises(ConfigError, match="stream_interval needs stream=True"):
        ExecutorConfig(stream_interval=16)
    with pytest.raises(ConfigError, match="stream_interval needs stream=True"):
        ExecutorConfig(backend=Backend.SGLANG, stream=True, stream_interval=16)
    with pytest.raises(ConfigError, match="stream_interval must be >= 1"):
        ExecutorConfig(stream=True, stream_interval=0)
    with pytest.raises(ConfigError, match="continuation with stream=True needs the vllm"):
        ExecutorConfig(backend=Backend.SGLANG, stream=True, continuation=True)
    sglang = RolloutConfig(num_groups=1, backend="sglang", stream=True)  # moves on by default
    assert not sglang.moves_active and "SGLang" in (sglang.moves_off_reason or "")
    assert not sglang.executor_config().continuation
    cfg = RolloutConfig(num_groups=1, stream=True, stream_interval=64).executor_config()
    assert cfg.stream_interval == 64


def test_chat_and_sglang_requests() -> None:
    msgs = ({"role": "user", "content": "hi"},)
    chat = build_request(Backend.VLLM_CHAT, "m", PromptInput("a", messages=msgs), SP, 4)
    assert chat["messages"] == [{"role": "user", "content": "hi"}] and chat["n"] == 4
    assert chat["logprobs"] is True and chat["top_logprobs"] == 1
    sg = build_request(
        Backend.SGLANG,
        "m",
        PromptInput("a", text="q"),
        SP,
        2,
        forced_tokens=5,
        seed=1,
        stream=True,
    )
    assert sg["text"] == "q" and sg["stream"] is True and sg["return_logprob"] is True
    sp = sg["sampling_params"]
    assert sp["max_new_tokens"] == 5 and sp["min_new_tokens"] == 5 and sp["ignore_eos"] is True
    assert sp["n"] == 2 and sp["sampling_seed"] == 1 and sp["top_k"] == 20
    with pytest.raises(ConfigError):
        build_request(Backend.VLLM, "m", PromptInput("a", messages=msgs), SP, 1)
    with pytest.raises(ConfigError):
        PromptInput("a", text="x", token_ids=(1,))


def test_parse_vllm_counts_per_choice() -> None:
    body = {
        "choices": [
            {"index": 1, "text": "b", "finish_reason": "stop", "token_ids": [1, 2, 3]},
            {
                "index": 0,
                "text": "a",
                "finish_reason": "length",
                "token_ids": None,
                "logprobs": {"tokens": ["x"], "token_logprobs": [-0.5]},
            },
        ],
        "usage": {"completion_tokens": 4},
    }
    out = parse_response(Backend.VLLM, body, 2, "here")
    assert [r.text for r in out] == ["a", "b"] and [r.num_tokens for r in out] == [1, 3]
    assert out[0].logprobs == (-0.5,) and out[1].token_ids == (1, 2, 3)
    single = {
        "choices": [{"index": 0, "text": "z", "finish_reason": "stop"}],
        "usage": {"completion_tokens": 7},
    }
    assert parse_response(Backend.VLLM, single, 1, "here")[0].num_tokens == 7


def test_parse_chat_and_sglang() -> None:
    chat = {
        "choices": [
            {
                "index": 0,
                "message": {"content": "hey"},
                "finish_reason": "length",
                "logprobs": {"content": [{"logprob": -1.0}, {"logprob": -2.0}]},
            }
        ]
    }
    (r,) = parse_response(Backend.VLLM_CHAT, chat, 1, "here")
    assert r.text == "hey" and r.num_tokens == 2 and r.logprobs == (-1.0, -2.0)
    sg = [
        {
            "text": "x",
            "output_ids": [5, 6],
            "meta_info": {
                "completion_tokens": 2,
                "finish_reason": {"type": "length", "length": 2},
                "output_token_logprobs": [[-0.1, 5, None], [-0.2, 6, None]],
            },
        },
        {"text": "y", "meta_info": {"completion_tokens": 1, "finish_reason": {"type": "stop"}}},
    ]
    out = parse_response(Backend.SGLANG, sg, 2, "here")
    assert [r.num_tokens for r in out] == [2, 1] and out[0].finish_reason == "length"
    assert out[0].logprobs == (-0.1, -0.2) and out[1].finish_reason == "stop"


def test_what_the_server_says_beyond_the_tokens_is_read_once_into_typed_fields() -> None:
    lp = {"tokens": ["a", "b"], "token_logprobs": [-0.5, -0.7],
          "top_logprobs": [{"a": -0.5}, {"b": -0.7, "c": -0.9}]}
    body = {"choices": [{"index": 0, "text": "ab", "token_ids": [1, 2], "logprobs": lp,
                         "finish_reason": "stop", "stop_reason": "</s>"}]}
    (r,) = parse_response(Backend.VLLM, body, 1, "here")
    assert r.token_texts == ("a", "b") and r.top_logprobs == tuple(lp["top_logprobs"])
    assert r.stop_reason == "</s>"
    bare = {"choices": [{"index": 0, "text": "ab", "token_ids": [1, 2], "finish_reason": "stop",
                         "stop_reason": None}]}
    (r,) = parse_response(Backend.VLLM, bare, 1, "here")
    assert r.token_texts is None and r.top_logprobs is None and r.stop_reason is None
    sg = {"text": "x", "output_ids": [5, 2], "meta_info": {
        "completion_tokens": 2, "finish_reason": {"type": "stop", "matched": 2}}}
    (r,) = parse_response(Backend.SGLANG, sg, 1, "here")
    assert r.stop_reason == 2 and r.token_texts is None


def test_chat_prompt_ids_come_once_per_request() -> None:
    # vLLM's chat completions put the (templated) prompt's ids beside the choices, not in them
    body = {
        "prompt_token_ids": [1, 9, 9, 2],
        "choices": [
            {"index": i, "message": {"content": "ok"}, "finish_reason": "stop",
             "token_ids": [7] * (i + 1)}
            for i in range(2)
        ],
    }
    out = parse_response(Backend.VLLM_CHAT, body, 2, "here")
    assert [r.prompt_token_ids for r in out] == [(1, 9, 9, 2)] * 2
    assert [r.num_tokens for r in out] == [1, 2]


def test_prompt_seed_from_a_prompt_file_line() -> None:
    p = PromptInput.from_dict({"prompt_id": "a", "prompt": "x", "seed": 12}, "f:1")
    assert p.seed == 12 and PromptInput.from_dict({"prompt_id": "b", "prompt": "x"}).seed is None
    with pytest.raises(ConfigError, match="f:1: prompt 'a': seed must be an integer"):
        PromptInput.from_dict({"prompt_id": "a", "prompt": "x", "seed": True}, "f:1")


def test_malformed_bodies_are_request_errors() -> None:
    with pytest.raises(RequestError, match="unexpected response shape"):
        parse_response(Backend.VLLM, {"nope": 1}, 1, "here")
    with pytest.raises(RequestError, match="expected 2 responses"):
        parse_response(Backend.VLLM, {"choices": [{"index": 0, "token_ids": [1]}]}, 2, "here")
    with pytest.raises(RequestError, match="no per-choice token count"):
        parse_response(Backend.VLLM, {"choices": [{"index": 0}, {"index": 1}]}, 2, "here")
