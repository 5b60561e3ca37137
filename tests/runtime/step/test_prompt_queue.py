"""A live rollout's held prompts (``runtime.step.prompt_queue``): the state dict keeps every prompt
whole, its seed included, and an id is held once."""

from __future__ import annotations

import json

import pytest

from tailsieve.errors import ConfigError
from tailsieve.runtime.engine.backends import PromptInput
from tailsieve.runtime.step.prompt_queue import PromptQueue

PROMPTS = (
    PromptInput("t", text="2 + 2 =", seed=7),
    PromptInput("i", token_ids=(1, 2, 3)),
    PromptInput("m", messages=({"role": "user", "content": "hi"},), seed=0),
)


def test_the_state_dict_keeps_each_prompt_whole_seed_included() -> None:
    q = PromptQueue()
    q.add(PROMPTS)
    by_id: dict[str, PromptInput] = {}
    drawn = list(q.draw(by_id))
    q.settle([], drawn[:2], by_id)  # two carried
    q.add([PromptInput("later", text="x", seed=3)])
    state = json.loads(json.dumps(q.state_dict()))
    back = PromptQueue()
    back.load_state_dict(state)
    assert list(back.pending) == [PromptInput("later", text="x", seed=3)]
    assert back.carried == {"t": PROMPTS[0], "i": PROMPTS[1]}
    with pytest.raises(ConfigError, match="'t' is already queued or carried"):
        back.add([{"prompt_id": "t", "prompt": "again"}])


def test_a_prompts_dict_form_reads_back_as_the_prompt() -> None:
    for p in PROMPTS:
        assert PromptInput.from_dict(json.loads(json.dumps(p.to_dict()))) == p
