"""Smoke runs of the speculation scripts: ``bench_acceptance.py`` on two recorded prompts, and
``check_spec_live.py`` against a stub server with known counters (and against a real vLLM CPU
server when ``TAILSIEVE_REAL_ENDPOINTS`` names one)."""

from __future__ import annotations

import importlib
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from smoke_helpers import repo_unchanged

from tailsieve.drafts.trace_groups import seeded_recording
from tailsieve.model.acceptance import load_acceptance_file

SOURCES = {"ngram", "suffix-running", "suffix-finished", "suffix-siblings", "seer-group",
           "rhymerl-epoch"}
SIMULATED = {"ngram", "suffix-siblings", "seer-group", "rhymerl-epoch"}  # lockstep ones not
SERVER_KS = [1, 2, 4, 8] if seeded_recording("smollm2-math") else [1, 2, 4]
REAL = [u for u in os.environ.get("TAILSIEVE_REAL_ENDPOINTS", "").split(",") if u]


def test_bench_acceptance(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg" / "acceptance-quick.json"
    with repo_unchanged():
        importlib.import_module("bench_acceptance").main(
            ["--max-prompts", "2", "--out", str(tmp_path), "--package-data", str(pkg)])
    data = json.loads((tmp_path / "acceptance.json").read_text())
    assert set(data["results"]) == SOURCES
    assert "--max-prompts 2" in data["provenance"]["command"]
    md = (tmp_path / "acceptance.md").read_text()
    assert all(f"| {s} |" in md for s in SOURCES)
    curves = load_acceptance_file(pkg)
    assert {c.source for c in curves.values()} == SIMULATED
    for c in curves.values():
        # the server tree per k (up to k = 4 where each has 3 independent siblings), the rest once
        assert [k for k, _ in c.tau_by_k] == (SERVER_KS if c.placement == "server" else [1])
        assert all(1.0 <= t <= 9.0 for _, t in c.tau_by_k)


class _Stub(BaseHTTPRequestHandler):
    """A vLLM-like server: every chat request answers the prompt's tokens 3..8 twice and adds
    fixed amounts to the speculative counters."""

    prompt: ClassVar[list[int]] = list(range(1, 11))
    answer: ClassVar[list[int]] = [3, 4, 5, 6, 7, 8, 3, 4, 5, 6, 7, 8, 99]
    per_request: ClassVar[dict[str, float]] = {
        "num_drafts": 3.0, "num_draft_tokens": 12.0, "num_accepted_tokens": 5.0}
    lock = threading.Lock()
    totals: ClassVar[dict[str, float]] = dict.fromkeys(per_request, 0.0)

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        with self.lock:
            lines = [f'vllm:spec_decode_{k}_total{{model_name="m"}} {v}'
                     for k, v in self.totals.items()]
        self._send(("\n".join(["# HELP x", *lines]) + "\n").encode(), "text/plain")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert body["return_token_ids"] is True and body["messages"]
        with self.lock:
            for k, v in self.per_request.items():
                self.totals[k] += v
        reply = {"prompt_token_ids": self.prompt, "choices": [{"token_ids": self.answer}]}
        self._send(json.dumps(reply).encode(), "application/json")


@pytest.fixture
def stub_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_check_spec_live_reads_the_counters_and_replays_the_answers(
        stub_url: str, tmp_path: Path) -> None:
    out = tmp_path / "live.json"
    importlib.import_module("check_spec_live").main(
        ["--url", stub_url, "--prompts", "2", "--samples", "3", "--out", str(out)])
    res = json.loads(out.read_text())
    assert res["engine"] == {f"{k}_total": 6 * v for k, v in _Stub.per_request.items()}
    assert res["engine_accepted_per_drafted"] == pytest.approx(5 / 12)
    assert res["response_lengths"] == [len(_Stub.answer)] * 6
    replay = res["replay"]
    assert replay["drafts"] > 0 and 0 < replay["accepted_tokens"] <= replay["drafted_tokens"]
    assert replay["tau"] > 1.0


@pytest.mark.skipif(not REAL, reason="TAILSIEVE_REAL_ENDPOINTS not set (no real-model servers)")
def test_check_spec_live_on_a_real_server_without_speculation(tmp_path: Path) -> None:
    out = tmp_path / "live.json"
    importlib.import_module("check_spec_live").main(
        ["--url", REAL[0], "--model", os.environ.get("TAILSIEVE_REAL_MODEL", "smollm2"),
         "--prompts", "1", "--samples", "2", "--max-tokens", "24", "--temperature", "0",
         "--out", str(out)])
    res = json.loads(out.read_text())
    assert all(v == 0 for v in res["engine"].values())
    assert len(res["response_lengths"]) == 2 and 0 < res["response_lengths"][0] <= 24
    assert res["replay"]["accepted_tokens"] <= res["replay"]["drafted_tokens"]
