"""Reading Hugging Face config.json files: the figures DESIGN 2b quotes, and errors that name
the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tailsieve.errors import ConfigError
from tailsieve.model.derive import SHIPPED_CONFIGS, shipped_config
from tailsieve.model.model_config import ModelConfig

QWEN3_4B = json.loads(
    (Path(__file__).parents[2] / "src/tailsieve/model/configs/qwen3-4b.json").read_text())


@pytest.mark.parametrize(("name", "layers", "full", "kv_bytes", "total_b", "active_b"), [
    ("qwen3-4b", 36, 36, 147_456, 4.02, 4.02),
    ("qwen3-30b-a3b", 48, 48, 98_304, 30.5, 3.04),
    ("qwen3.5-4b", 32, 8, 32_768, 4.2, 4.2),
    ("qwen3.5-35b-a3b", 40, 10, 20_480, 34.7, 2.95),
])
def test_shipped_configs_give_the_published_sizes(name: str, layers: int, full: int,
                                                  kv_bytes: int, total_b: float,
                                                  active_b: float) -> None:
    m = shipped_config(name)
    assert (m.num_layers, m.num_full_attention_layers, m.kv_bytes_per_token) == \
        (layers, full, kv_bytes)
    assert m.total_params / 1e9 == pytest.approx(total_b, rel=0.02)
    assert m.active_params / 1e9 == pytest.approx(active_b, rel=0.03)


def test_every_shipped_config_parses() -> None:
    for name in SHIPPED_CONFIGS:
        assert shipped_config(name).name == name
    with pytest.raises(ConfigError, match=r"unknown model 'llama'.*qwen3-4b"):
        shipped_config("llama")


def test_text_config_wins_over_top_level_and_interval_gives_layout() -> None:
    cfg = {"hidden_size": 1, "text_config": {
        "num_hidden_layers": 8, "hidden_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 512, "vocab_size": 1000,
        "full_attention_interval": 4, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
        "linear_key_head_dim": 32, "linear_value_head_dim": 32}}
    m = ModelConfig.from_hf(cfg, "tiny")
    assert m.hidden_size == 256 and m.num_full_attention_layers == 2
    assert m.attn_output_gate  # hybrid (Qwen3.5-style) attention defaults to a gated output
    kd, vd = 2 * 32, 4 * 32
    assert m.linear_state_bytes_per_seq == 6 * (4 * 32 * 32 + (2 * kd + vd) * 3) * 2


def test_head_dim_defaults_to_hidden_over_heads_and_dtype_to_bf16() -> None:
    cfg = {k: v for k, v in QWEN3_4B.items() if k not in ("head_dim", "torch_dtype")}
    m = ModelConfig.from_hf(cfg)
    assert m.head_dim == 2560 // 32 and m.dtype_bytes == 2
    assert ModelConfig.from_hf({**QWEN3_4B, "torch_dtype": "float32"}).dtype_bytes == 4


def drop(key: str) -> dict[str, Any]:
    return {k: v for k, v in QWEN3_4B.items() if k != key}


@pytest.mark.parametrize(("cfg", "field"), [
    (drop("num_hidden_layers"), "num_hidden_layers"),
    (drop("hidden_size"), "hidden_size"),
    (drop("vocab_size"), "vocab_size"),
    (drop("intermediate_size"), "intermediate_size"),
    ({**QWEN3_4B, "hidden_size": "2560"}, "hidden_size"),
    ({**QWEN3_4B, "num_attention_heads": 0}, "num_attention_heads"),
    ({**QWEN3_4B, "num_key_value_heads": 2.5}, "num_key_value_heads"),
    ({**QWEN3_4B, "tie_word_embeddings": "yes"}, "tie_word_embeddings"),
    ({**QWEN3_4B, "torch_dtype": "int3"}, "torch_dtype"),
    ({**QWEN3_4B, "layer_types": ["full_attention"] * 3}, "layer_types"),
    ({**QWEN3_4B, "layer_types": ["mamba"] * 36}, "layer_types"),
    ({**QWEN3_4B, "full_attention_interval": 0}, "full_attention_interval"),
    ({**QWEN3_4B, "num_experts": 8}, "num_experts_per_tok"),
    ({**QWEN3_4B, "num_experts": 8, "num_experts_per_tok": 2}, "moe_intermediate_size"),
    ({**QWEN3_4B, "full_attention_interval": 4}, "linear_num_key_heads"),
    ({**QWEN3_4B, "text_config": [1]}, "text_config"),
    ({**drop("head_dim"), "num_attention_heads": 7}, "head_dim"),
])
def test_malformed_or_missing_field_is_named(cfg: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=f"'{field}'"):
        ModelConfig.from_hf(cfg, "cfg")


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        ModelConfig.load(tmp_path / "nope.json")
    bad = tmp_path / "config.json"
    bad.write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        ModelConfig.load(bad)
    bad.write_text(json.dumps(QWEN3_4B))
    assert ModelConfig.load(bad).name == tmp_path.name
