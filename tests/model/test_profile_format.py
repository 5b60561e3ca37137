"""Profile files: the optional replica facts (capacity, max_num_seqs, provenance) and files
written by earlier versions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailsieve.errors import ProfileError
from tailsieve.model.profiles import (
    DEFAULT_PROFILE,
    DERIVED_PROFILES,
    PROFILE_NAMES,
    builtin_profile,
    list_profiles,
    load_profile,
)
from tailsieve.model.throughput import ThroughputModel

OLD_FILE = {  # as written by `tailsieve profile` before issue 10
    "name": "measured-old", "source": "x",
    "points": [{"batch_size": 1, "step_s": 0.01}, {"batch_size": 8, "step_s": 0.02}],
    "context_s_per_token": 3e-6,
    "measurements": [{"batch_size": 1, "step_s": 0.01}],
}


def test_old_files_load_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps(OLD_FILE))
    m = load_profile(path)
    assert m.tau(8) == 0.02 and m.context_s_per_token == 3e-6
    assert m.kv_capacity_tokens is None and m.max_num_seqs is None and m.provenance == {}
    out = m.to_dict()
    assert set(out) == {"name", "source", "points", "context_s_per_token"}
    no_k = {k: v for k, v in OLD_FILE.items() if k != "context_s_per_token"}
    assert ThroughputModel.from_dict(no_k).context_s_per_token == 0.0


def test_new_fields_round_trip_and_survive_scaling(tmp_path: Path) -> None:
    m = ThroughputModel.from_dict({**OLD_FILE, "kv_capacity_tokens": 400_000,
                                   "max_num_seqs": 1024, "provenance": {"kind": "derived"}})
    path = tmp_path / "p.json"
    m.save(path)
    back = load_profile(path)
    assert (back.kv_capacity_tokens, back.max_num_seqs, back.provenance) == \
        (400_000, 1024, {"kind": "derived"})
    for other in (m.scaled(0.5), m.with_context(1e-6)):
        assert (other.kv_capacity_tokens, other.max_num_seqs) == (400_000, 1024)
        assert other.provenance == {"kind": "derived"}
    assert m.scaled(0.5).context_s_per_token == pytest.approx(1.5e-6)
    assert m.step_s(8, 1000) == pytest.approx(0.02 + 3e-3) and m.step_s(0, 10) == 0.0


@pytest.mark.parametrize(("extra", "pattern"), [
    ({"kv_capacity_tokens": 0}, "kv_capacity_tokens must be a positive integer"),
    ({"kv_capacity_tokens": 1.5}, "kv_capacity_tokens must be an integer"),
    ({"max_num_seqs": "many"}, "max_num_seqs must be an integer"),
    ({"max_num_seqs": True}, "max_num_seqs must be an integer"),
    ({"provenance": [1]}, "provenance must be a JSON object"),
])
def test_bad_new_fields_named(extra: dict[str, object], pattern: str) -> None:
    with pytest.raises(ProfileError, match=pattern):
        ThroughputModel.from_dict({**OLD_FILE, **extra})


def test_shipped_profiles_listed_default_first_and_gpu_retired() -> None:
    names = [m.name for m in list_profiles()]
    assert names == list(PROFILE_NAMES) and names[0] == DEFAULT_PROFILE == "qwen3-4b-h100"
    assert set(DERIVED_PROFILES) <= set(names) and "gpu" not in names
    for bad in ("gpu",):
        with pytest.raises(ProfileError, match=r"retired.*qwen3-4b-h100.*illustrative-flat"):
            load_profile(bad)
        with pytest.raises(ProfileError, match="retired"):
            builtin_profile(bad)
    flat = load_profile("illustrative-flat")
    assert flat.provenance["kind"] == "illustrative" and "ILLUSTRATION" in flat.source
    assert not flat.has_context_term


def test_derived_profiles_carry_capacity_and_context_term() -> None:
    for name in DERIVED_PROFILES:
        m = builtin_profile(name)
        assert m.has_context_term and m.kv_capacity_tokens and m.max_num_seqs == 1024
        assert m.provenance["kind"] == "derived" and "derived, not measured" in m.source
