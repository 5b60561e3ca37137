"""The top-level API: every name in ``tailsieve.__all__`` resolves, lazily."""

from __future__ import annotations

import subprocess
import sys

import pytest

import tailsieve


def test_all_names_resolve_to_the_objects_of_their_modules() -> None:
    from tailsieve.runtime.step.rollout import TailSieveRollout
    from tailsieve.sim.api import simulate

    assert set(tailsieve.__all__) == set(tailsieve._EXPORTS) | {"__version__"}
    for name in tailsieve.__all__:
        assert getattr(tailsieve, name) is not None
    assert tailsieve.TailSieveRollout is TailSieveRollout and tailsieve.simulate is simulate


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = tailsieve.nope  # type: ignore[attr-defined]


def test_import_is_lazy() -> None:
    code = "import sys, tailsieve; print(any(m.startswith('tailsieve.') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_simulate_pairs_policies_against_uniform() -> None:
    res = tailsieve.simulate("paper-math", policies=["tailsieve"], steps=5, groups=16, replicas=4)
    assert list(res.summaries) == ["uniform", "tailsieve"]
    assert res.speedup("uniform") == pytest.approx(1.0)
    s = res.summaries["tailsieve"]
    assert res.speedup("tailsieve") == pytest.approx(
        res.summaries["uniform"]["steady_step_s"] / s["steady_step_s"]
    )
    assert res.to_dict()["settings"]["replicas"] == 4
    with pytest.raises(tailsieve.ConfigError, match="not simulated"):
        res.speedup("seer-oracle")
    with pytest.raises(tailsieve.ConfigError, match="unknown policy"):
        tailsieve.simulate(policies=["fastest"])


def test_simulate_matches_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from tailsieve.cli.main import main

    args = ["--workload", "aime", "--steps", "4", "--groups", "16", "--replicas", "4"]
    assert main(["simulate", *args, "--policy", "tailsieve", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    api = tailsieve.simulate("aime", policies=["tailsieve"], steps=4, groups=16, replicas=4)
    def timeless(rows: list[dict[str, object]]) -> list[dict[str, object]]:
        return [{k: v for k, v in r.items() if k != "max_decision_s"} for r in rows]

    assert timeless(cli["policies"]) == timeless(json.loads(json.dumps(api.to_dict()["policies"])))
