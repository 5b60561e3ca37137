"""Smoke test of the grounded-profile suite (``benchmarks/grounded``): every item runs in a
tiny configuration, writes its JSON, and the markdown section is inserted and replaced."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

CASES: dict[str, tuple[dict[str, Any], set[str]]] = {
    "headline": ({"steps": 7, "seeds": (0, 1), "policies": ("uniform", "uniform-oracle",
                                                           "tailsieve-fixed", "tailsieve"),
                  "configs": (("t", "paper-math", "qwen3-4b-h100", 4, 16),)}, {"configs"}),
    "table4": ({"steps": 6, "seeds": (0,), "sizes": (16,), "profiles": ("qwen3-4b-h100",)},
               {"cells"}),
    "fig6b": ({"steps": 6, "profiles": ("qwen3-4b-h100",)}, {"panels"}),
    "table2": ({"steps": 6, "seeds": (0,), "profiles": ("qwen3.5-4b-h100",)}, {"cells"}),
}


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("grounded")


@pytest.mark.parametrize("name", sorted(CASES))
def test_item_runs_and_writes_json(name: str, out_dir: Path) -> None:
    kwargs, keys = CASES[name]
    payload = importlib.import_module(f"grounded.{name}").run(out_dir, True, **kwargs)
    data = json.loads((out_dir / f"{name}.json").read_text())
    assert keys | {"name", "settings", "runtime_s", "png", "machine"} <= set(data)
    assert (out_dir / payload["png"]).is_file()
    assert "hand" not in data["settings"]["profile_used"]


def test_headline_rows_carry_the_paired_statistic(out_dir: Path) -> None:
    data = json.loads((out_dir / "headline.json").read_text())
    rows = {r["policy"]: r for r in data["configs"][0]["rows"]}
    assert rows["uniform"]["paired"]["mean"] == pytest.approx(1.0)
    st = rows["tailsieve"]["paired"]
    assert st["num_seeds"] == 2 and st["steady_from"] == 5 and st["num_steady_steps"] == 2
    assert st["ci_low"] <= st["mean"] <= st["ci_high"]
    # tailsieve starts balanced (spread, m0 = 0) and wastes tokens only once it isolates;
    # tailsieve-fixed isolates from the start (m0 = R // 2) and always cuts
    assert 0 <= rows["tailsieve"]["wasted_token_fraction"] < 1
    assert (rows["tailsieve"]["wasted_token_fraction"] > 0) == (
        (rows["tailsieve"]["aborted_replica_fraction"] or 0) > 0)
    assert 0 < rows["tailsieve-fixed"]["wasted_token_fraction"] < 1


def test_table2_states_acceptance_rates(out_dir: Path) -> None:
    data = json.loads((out_dir / "table2.json").read_text())
    cols = {c["column"]: c for c in data["settings"]["columns"]}
    assert cols["+MTP"]["acceptance_per_token"] == pytest.approx(0.75)
    assert cols["+DFlash"]["spec"] == "dflash:4"
    mtp = next(c for c in data["cells"] if c["column"] == "+MTP")
    assert {r["policy"] for r in mtp["rows"]} == {"uniform", "tailsieve-fixed", "tailsieve",
                                                  "uniform + spec"}


def test_markdown_section_is_inserted_then_replaced(out_dir: Path, tmp_path: Path) -> None:
    from grounded import report

    md = tmp_path / "B.md"
    md.write_text("# Bench\n\nkept above\n")
    report.write(out_dir, BENCH.parent, md)
    first = md.read_text()
    assert first.startswith("# Bench\n\nkept above\n")
    assert first.count(report.BEGIN) == 1 and "Paper Table 4" in first
    md.write_text(first + "kept below\n")
    report.write(out_dir, BENCH.parent, md)
    second = md.read_text()
    assert second.count(report.BEGIN) == 1 and second.endswith("kept below\n")
    assert (out_dir / "grounded.md").read_text().startswith("## Grounded profiles")


def test_profile_falls_back_to_the_hand_profile() -> None:
    from grounded.common import HAND, profile

    model, used = profile("no-such-profile-yet")
    assert used == HAND
    assert model.tau(1) == pytest.approx(5.02e-3)
    assert model.context_s_per_token == pytest.approx(55e-9)


def test_settled_at() -> None:
    from grounded.fig6b import settled_at

    assert settled_at([0, 4, 4, 8, 9, 8, 9], [0, 2, 2, 2, 2, 2, 2]) == 3
    assert settled_at([0, 4, 4, 4], [0, 1, 2, 2]) == 2
    assert settled_at([0, 0, 0], [0, 0, 0]) == 0
