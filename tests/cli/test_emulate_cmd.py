"""``tailsieve emulate``: option validation and a real foreground run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tailsieve.cli import emulate_cmd
from tailsieve.errors import ConfigError, ProfileError
from tailsieve.runtime.emulator import EmulatorConfig
from tailsieve.runtime.emulator.runner import READY_PREFIX


def _app() -> typer.Typer:
    app = typer.Typer()
    app.callback()(lambda: None)
    app.command("emulate")(emulate_cmd.emulate)
    return app


@pytest.mark.parametrize(("args", "exc"), [
    (["--time-scale", "0"], ConfigError),
    (["--error-rate", "1.5"], ConfigError),
    (["--slowdown", "-1"], ConfigError),
    (["--max-num-seqs", "0"], ConfigError),
    (["--crash-mode", "boom"], ConfigError),
    (["--port", "70000"], ConfigError),
    (["--crash-after", "-2"], ConfigError),
    (["--model-name", "a b"], ConfigError),
    (["--profile", "nope"], ProfileError),
    (["--spec", "nope"], ConfigError),
    (["--spec", "seer", "--spec-gate", "sometimes"], ConfigError),
    (["--spec", "seer", "--spec-k", "0"], ConfigError),
])
def test_bad_options_raise_tailsieve_errors(args: list[str], exc: type[Exception]) -> None:
    res = CliRunner().invoke(_app(), ["emulate", "--port", "0", *args])
    assert isinstance(res.exception, exc), res.output


def test_config_from_profile_validates() -> None:
    cfg = EmulatorConfig.from_profile("illustrative-flat", time_scale=0.1, slowdown=2.0)
    assert cfg.replica_config().throughput.tau(1) == pytest.approx(
        2.0 * cfg.throughput.tau(1))
    with pytest.raises(ConfigError):
        EmulatorConfig.from_profile("cpu", length_sigma=float("nan"))


def test_emulate_runs_until_sigterm() -> None:
    code = ("import typer; from tailsieve.cli import emulate_cmd; app = typer.Typer(); "
            "app.callback()(lambda: None); app.command('emulate')(emulate_cmd.emulate); app()")
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "emulate", "--port", "0", "--time-scale", "0.01",
         "--model-name", "tiny"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith(READY_PREFIX), line
        url = line[len(READY_PREFIX):]
        req = urllib.request.Request(
            url + "/v1/completions", method="POST", headers={"Content-Type": "application/json"},
            data=json.dumps({"model": "tiny", "prompt": "hi", "max_tokens": 7,
                             "ignore_eos": True}).encode())
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert json.load(resp)["usage"]["completion_tokens"] == 7
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(10) == 0


def test_emulator_speculates_with_an_acceptance_preset(tmp_path: Path) -> None:
    cfg = EmulatorConfig.from_profile("qwen3-4b-h100")
    one = emulate_cmd.with_speculation(cfg, "seer", k=1)
    eight = emulate_cmd.with_speculation(cfg, "seer", k=8)
    # Seer's group drafter does not depend on the siblings on this server
    assert eight.throughput.tau(1) == one.throughput.tau(1) < cfg.throughput.tau(1)
    tree = tmp_path / "acceptance-toy.json"  # a server tree: k = 1 + finished siblings here
    tree.write_text(json.dumps({"sources": {"suffix-siblings": {"1": 1.2, "8": 2.4}}}))
    alone = emulate_cmd.with_speculation(cfg, f"{tree}:suffix-siblings", k=1)
    full = emulate_cmd.with_speculation(cfg, f"{tree}:suffix-siblings", k=8)
    assert full.throughput.tau(1) < alone.throughput.tau(1)
    gated = emulate_cmd.with_speculation(cfg, "low", gate="pays")
    assert gated.throughput.tau(1) < cfg.throughput.tau(1)
    assert gated.max_num_seqs == cfg.max_num_seqs
