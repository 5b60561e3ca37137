"""``tailsieve serve``: bad options exit 2 with one error line, and a real run over emulated
servers answers the ``openai`` client until SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from openai import OpenAI

from tailsieve.cli import serve_cmd
from tailsieve.cli.main import main
from tailsieve.runtime.emulator import EmulatorFleet
from tailsieve.runtime.proxy import ProxyConfig


@pytest.mark.parametrize(("argv", "says"), [
    (["serve"], "give the servers' endpoints, or num_workers"),
    (["serve", "--endpoints", "http://127.0.0.1:9", "--backend", "tgi"], "--backend"),
    (["serve", "--endpoints", "127.0.0.1:9"], "must be an http(s):// URL"),
    (["serve", "--endpoints", "http://127.0.0.1:9", "--policy", "best"], "unknown session policy"),
    (["serve", "--endpoints", "http://127.0.0.1:9", "--policy", "oracle"], "simulator only"),
    (["serve", "--endpoints", "http://127.0.0.1:9", "--profile", "nope"], "nope"),
    (["serve", "--endpoints", "http://127.0.0.1:9", "--piece-tokens", "0"], "piece_tokens"),
    (["serve", "--endpoints", "http://127.0.0.1:9", "--stall-floor", "0"], "stall floor_s"),
    (["serve", "--endpoints", "http://127.0.0.1:9", "--stall-factor", "nan"], "stall factor"),
    (["serve", "--num-workers", "0"], "num_workers"),
    (["serve", "--endpoints", "http://127.0.0.1:9", "--port", "70000"], "--port"),
    (["serve", "--endpoints", "http://127.0.0.1:9", "--admin-port", "-1"], "--admin-port"),
    (["serve", "--endpoints", "http://127.0.0.1:9", "--max-body-mb", "0"], "--max-body-mb"),
    (["serve", "--endpoints", "http://127.0.0.1:9", "--max-concurrency", "0"],
     "max_concurrency"),
    (["serve", "--endpoints", "http://127.0.0.1:9", "--read-timeout", "0"], "read_timeout_s"),
    (["serve", "--num-workers", "2"], "--admin-port"),  # registering is an admin call
    (["serve", "--endpoints", "http://127.0.0.1:9", "--backend", "sglang", "--stream-pieces"],
     "gateway.stream"),
    (["serve", "--endpoints", "http://127.0.0.1:9", "--stream-interval", "4"],
     "stream_interval (4) needs stream=True"),
])
def test_bad_options_exit_2_with_one_line(argv: list[str], says: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and says in err[0]


def test_stall_flags_reach_the_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    got: list[ProxyConfig] = []

    async def serve(config: ProxyConfig, *args: object, **kw: object) -> None:
        got.append(config)

    monkeypatch.setattr(serve_cmd, "serve_proxy", serve)
    argv = ["serve", "--endpoints", "http://127.0.0.1:9", "--stall-floor", "5",
            "--stall-factor", "3"]
    assert main(argv) == 0
    stall = got[0].gateway.stall
    assert (stall.floor_s, stall.factor) == (5.0, 3.0)
    assert got[0].gateway.move.stall is stall
    assert not got[0].gateway.stream


def test_streamed_pieces_reach_the_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    got: list[ProxyConfig] = []

    async def serve(config: ProxyConfig, *args: object, **kw: object) -> None:
        got.append(config)

    monkeypatch.setattr(serve_cmd, "serve_proxy", serve)
    argv = ["serve", "--endpoints", "http://127.0.0.1:9", "--stream-pieces",
            "--stream-interval", "8"]
    assert main(argv) == 0
    assert got[0].gateway.stream and got[0].gateway.stream_interval == 8


def test_serve_answers_an_openai_client_until_sigterm(tmp_path: Path) -> None:
    with EmulatorFleet.start(2, profile="cpu", time_scale=0.01) as fleet:
        code = "import sys; from tailsieve.cli.main import main; sys.exit(main())"
        proc = subprocess.Popen(
            [sys.executable, "-c", code, "serve", "--endpoints", ",".join(fleet.urls),
             "--port", "0", "--profile", "cpu"],
            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            assert proc.stderr is not None
            line = proc.stderr.readline()
            m = re.search(r"listening on (http://\S+) \(2 vllm servers; admin calls refused; "
                          r"policy tailsieve; profile cpu; moves on\)", line)
            assert m, line
            c = OpenAI(base_url=m.group(1) + "/v1", api_key="none", max_retries=0)
            out = c.completions.create(model="tailsieve-emulated", prompt="hello world",
                                       max_tokens=12, extra_headers={"X-Session-ID": "s1"})
            assert out.choices[0].text == " tok" * out.usage.completion_tokens  # type: ignore[union-attr]
            assert [m.id for m in c.models.list()] == ["tailsieve-emulated"]
        finally:
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.wait(30) == 0
