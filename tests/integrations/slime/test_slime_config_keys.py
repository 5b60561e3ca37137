"""The TailSieve settings slime users are told to set exist, and reach the rollout the way slime
sets them: slime has no ``--tailsieve-*`` command-line flags (its ``train.py`` parses its own
flags only); a ``--custom-config-path`` YAML sets each of its keys on ``args``
(``slime.utils.arguments.parse_args``), which ``SlimeSettings.from_args`` reads."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from test_slime_adapter import make_args

from tailsieve.integrations.slime.settings import SlimeSettings

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "slime" / "tailsieve.yaml"
DOC = REPO / "docs" / "integrations-slime.md"


def custom_config(text: str, **kw: Any) -> SlimeSettings:
    """What slime's ``parse_args`` does with ``--custom-config-path``: ``setattr`` per key."""
    args = make_args(["http://w:1"], sglang_router_ip="127.0.0.1", sglang_router_port=3000, **kw)
    for key, value in (yaml.safe_load(text) or {}).items():
        setattr(args, key, value)
    return SlimeSettings.from_args(args)


def doc_yaml_keys() -> set[str]:
    block = re.search(r"```yaml\n(.*?)```", DOC.read_text(), re.S)
    assert block is not None
    return set(yaml.safe_load(block.group(1)))


def test_the_documented_keys_are_the_examples_and_each_is_read() -> None:
    example = yaml.safe_load(EXAMPLE.read_text())
    assert doc_yaml_keys() == set(example)
    s = custom_config(EXAMPLE.read_text())
    assert s.moves and s.piece_tokens is None and s.policy == "tailsieve"
    off = custom_config("tailsieve_moves: false\ntailsieve_policy: uniform-requests\n")
    assert not off.moves and not off.rollout_config().moves_active
    assert off.policy == "uniform-requests"
    pieces = custom_config("tailsieve_piece_tokens: 512\ntailsieve_seam_s: 0.02\n")
    assert pieces.piece_tokens == 512 and pieces.rollout_config().piece_tokens == 512
    assert pieces.rollout_config().controller["seam_s"] == 0.02


def test_no_command_line_flag_is_named_for_slime() -> None:
    for path in (DOC, EXAMPLE, REPO / "examples" / "slime" / "rollout_args.sh"):
        assert not re.search(r"--tailsieve[-_]", path.read_text()), path
