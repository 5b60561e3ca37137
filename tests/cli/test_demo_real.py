"""``tailsieve demo --real-model`` / ``--endpoints``: the demo on real vLLM servers serving the
real model (natural lengths, the shipped math word problems)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tailsieve.cli.main import main
from tailsieve.errors import ConfigError
from tailsieve.runtime.demo_real import RealDemoConfig

REAL = [u for u in os.environ.get("TAILSIEVE_REAL_ENDPOINTS", "").split(",") if u]


def test_a_missing_model_is_named_with_the_set_up_command(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"setup_real_model\.sh"):
        RealDemoConfig(model_dir=tmp_path / "nothing")
    with pytest.raises(ConfigError, match="--real-model DIR or --endpoints"):
        RealDemoConfig(model_dir=None)
    with pytest.raises(ConfigError, match="max_tokens"):
        RealDemoConfig(model_dir=None, endpoints=("http://x",), max_tokens=5000)


def test_cli_refuses_a_missing_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["demo", "--real-model", str(tmp_path / "nothing"), "--out", str(tmp_path / "o")])
    assert rc == 2 and "setup_real_model.sh" in capsys.readouterr().err


@pytest.mark.vllm
@pytest.mark.skipif(len(REAL) < 2, reason="TAILSIEVE_REAL_ENDPOINTS not set (two real-model "
                    "vLLM servers; scripts/test.sh starts them)")
def test_demo_on_the_real_model(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    rc = main(["demo", "--endpoints", ",".join(REAL), "--groups", "2", "--group-size", "2",
               "--steps", "1", "--max-tokens", "48", "--no-progress", "--out", str(out)])
    assert rc == 0
    demo = json.loads((out / "demo.json").read_text())
    assert demo["settings"]["real_model"] is True
    assert [p["policy"] for p in demo["policies"]] == ["uniform", "uniform-requests", "tailsieve"]
    steps = [json.loads(x) for x in (out / "steps.jsonl").read_text().splitlines()]
    regular = [s for s in steps if not s["is_flush"]]
    assert len(regular) == 3 * 2 and all(s["num_groups"] == 2 for s in regular)
    # natural lengths: responses stop on their own or at the cap
    assert all(0 < s["delivered_tokens"] <= 2 * 2 * 48 for s in regular)
    assert (out / "report.html").is_file() and (out / "controller_profile.json").is_file()
