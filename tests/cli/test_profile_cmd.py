"""``tailsieve profile --from-config / --model`` and ``tailsieve profiles [compare]`` through
``main``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tailsieve.cli.main import main
from tailsieve.model.profiles import DERIVED_PROFILES, builtin_profile, load_profile

CONFIG = Path(__file__).parents[2] / "src/tailsieve/model/configs/qwen3-4b.json"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_from_config_writes_the_shipped_profile(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                assert_json_close: Callable[..., None]) -> None:
    out = tmp_path / "q.json"
    rc, stdout, _ = run(["profile", "--from-config", str(CONFIG), "--gpu", "h100", "--out",
                         str(out), "--name", "qwen3-4b-h100"], capsys)
    assert rc == 0 and "wrote" in stdout
    mine, shipped = load_profile(out), builtin_profile("qwen3-4b-h100")
    assert_json_close([p.step_s for p in mine.points], [p.step_s for p in shipped.points])
    assert_json_close(mine.context_s_per_token, shipped.context_s_per_token)
    assert mine.kv_capacity_tokens == shipped.kv_capacity_tokens
    assert mine.provenance["model"]["config_source"] == f"config file {CONFIG}"


@pytest.mark.parametrize(("name", "spec"), list(DERIVED_PROFILES.items()))
def test_model_flag_reproduces_each_shipped_profile(name: str, spec: tuple[str, str, int],
                                                    tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str],
                                                    assert_json_close: Callable[..., None]
                                                    ) -> None:
    model, gpu, tp = spec
    out = tmp_path / f"{name}.json"
    rc, _, _ = run(["profile", "--model", model, "--gpu", gpu, "--tp", str(tp), "--out",
                    str(out), "--name", name], capsys)
    assert rc == 0
    assert_json_close(json.loads(out.read_text()), builtin_profile(name).to_dict())


def test_derived_profile_to_stdout_with_efficiency_override(
        capsys: pytest.CaptureFixture[str]) -> None:
    rc, stdout, err = run(["profile", "--model", "qwen3-4b", "--efficiency",
                           "attention_bandwidth=0.75"], capsys)
    assert rc == 0 and "KV capacity" in err
    data = json.loads(stdout)
    assert data["provenance"]["efficiencies"]["attention_bandwidth"] == 0.75
    assert data["context_s_per_token"] < builtin_profile("qwen3-4b-h100").context_s_per_token


@pytest.mark.parametrize(("edit", "field"), [
    (lambda c: c.pop("num_hidden_layers"), "num_hidden_layers"),
    (lambda c: c.update(hidden_size="wide"), "hidden_size"),
    (lambda c: c.update(layer_types=["full_attention"]), "layer_types"),
])
def test_malformed_or_missing_config_field_exits_2_naming_it(
        edit: object, field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = json.loads(CONFIG.read_text())
    edit(cfg)  # type: ignore[operator]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    rc, _, err = run(["profile", "--from-config", str(path), "--gpu", "h100"], capsys)
    assert rc == 2
    assert err.count("\n") == 1 and f"'{field}'" in err and err.startswith("error:")


@pytest.mark.parametrize(("argv", "pattern"), [
    (["profile", "--model", "qwen3-4b", "--gpu", "v100"], "unknown gpu 'v100'"),
    (["profile", "--model", "qwen3-30b-a3b", "--gpu", "l40s"], "does not fit on l40s"),
    (["profile", "--model", "nope"], "unknown model 'nope'"),
    (["profile", "--model", "qwen3-4b", "--tp", "0"], "tensor parallelism"),
    (["profile", "--model", "qwen3-4b", "--efficiency", "speed=2"], "--efficiency 'speed=2'"),
    (["profile", "--model", "qwen3-4b", "--efficiency", "compute=fast"], "not a number"),
    (["profile", "--model", "qwen3-4b", "--efficiency", "compute=2"], "compute must be in"),
    (["profile"], "give --endpoint URL"),
    (["profile", "--from-config", "missing.json"], "model config not found"),
])
def test_bad_derive_arguments_exit_2(argv: list[str], pattern: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(argv, capsys)
    assert rc == 2 and pattern in err


def test_profiles_lists_the_five_derived_profiles(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(["profiles"], capsys)
    assert rc == 0
    for name in (*DERIVED_PROFILES, "cpu", "illustrative-flat"):
        assert name in out
    rc, out, _ = run(["profiles", "--json"], capsys)
    rows = {r["name"]: r for r in json.loads(out)}
    q = rows["qwen3-4b-h100"]
    m = builtin_profile("qwen3-4b-h100")
    assert q["b1_tokens_per_s"] == pytest.approx(1 / m.tau(1))
    assert q["b64_ctx2k_tokens_per_s"] == pytest.approx(1 / m.step_s(64, 64 * 2048))
    assert q["kv_capacity_tokens"] == m.kv_capacity_tokens and q["kind"] == "derived"
    assert rows["cpu"]["kv_capacity_tokens"] is None
    rc, out, _ = run(["profiles", "--show", "qwen3-4b-h100"], capsys)
    shown = json.loads(out)
    assert rc == 0 and shown["kv_capacity_tokens"] == m.kv_capacity_tokens
    assert shown["provenance"]["kind"] == "derived"
    rc, out, _ = run(["profiles", "validate", "--json"], capsys)
    assert rc == 0 and {r["part"] for r in json.loads(out)} >= {"linear", "attention", "batch-1"}


def test_profiles_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(["profiles", "compare", "qwen3-4b-h100", "qwen3-4b-h200", "--json"], capsys)
    assert rc == 0
    data = json.loads(out)
    assert (data["a"], data["b"]) == ("qwen3-4b-h100", "qwen3-4b-h200")
    assert all(r["ratio_a_over_b"] > 1.1 for r in data["rows"])  # H200 is faster everywhere
    a, b = builtin_profile("qwen3-4b-h100"), builtin_profile("qwen3-4b-h200")
    row = next(r for r in data["rows"] if r["batch"] == 64 and r["context_per_request"] == 4096)
    assert row["tau_a_s"] == pytest.approx(a.step_s(64, 64 * 4096))
    assert row["tau_b_s"] == pytest.approx(b.step_s(64, 64 * 4096))
    path = tmp_path / "same.json"
    a.save(path)
    rc, out, _ = run(["profiles", "compare", str(path), "qwen3-4b-h100"], capsys)
    assert rc == 0 and "1.000" in out
    rc, _, err = run(["profiles", "compare", "gpu", "cpu"], capsys)
    assert rc == 2 and "retired" in err


@pytest.mark.parametrize("columns", [100, 80])
def test_profiles_validate_is_readable_at_100_columns(
        columns: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from tailsieve.model.validation import format_value, validation_rows

    monkeypatch.setenv("COLUMNS", str(columns))
    rc, out, _ = run(["profiles", "validate"], capsys)
    assert rc == 0
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= columns
    rows = validation_rows()
    assert {r.part for r in rows} >= {"prefill", "linear", "attention", "tpot"}
    for r in rows:  # every number is printed whole, on the row of its table line
        small = r.measured < 1e-3
        want = (format_value(r.measured, r.unit, small), format_value(r.model, r.unit, small),
                f"{100 * r.off:+.1f}%")
        assert any(all(w in line for w in want) for line in lines), want
    assert "[1] microsoft/vidur" in out and "docs.nvidia.com/nim" in out.replace("\n", "")
