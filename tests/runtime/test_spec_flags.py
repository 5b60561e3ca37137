"""Launch flags of a pool's speculation: parsing, vLLM and SGLang flags, and (with the vLLM
venv) every flag and config key checked by vLLM's own argument parser and SpeculativeConfig."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailsieve.errors import ConfigError
from tailsieve.model.speculative import SpecMethod
from tailsieve.runtime.launcher import LaunchConfig
from tailsieve.runtime.spec_flags import METHODS, PoolSpeculation

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(os.environ.get("TAILSIEVE_VLLM_PYTHON", str(ROOT / ".venv-vllm" / "bin" / "python")))
SGLANG_PYTHON = os.environ.get("TAILSIEVE_SGLANG_PYTHON")

# every method, with and without options: what the launch tests check against the engines
EXAMPLES = (
    "ngram:4",
    "ngram:8,prompt_lookup_min=2,prompt_lookup_max=5",
    "suffix:8",
    "suffix:16,suffix_decoding_max_tree_depth=32,suffix_decoding_max_cached_requests=5000,"
    "suffix_decoding_max_spec_factor=2.0,suffix_decoding_min_token_prob=0.2",
    "mtp:3",
    "eagle:4,model=/drafters/eagle",
    "eagle3:4,model=/drafters/eagle3",
    "dflash:8,model=/drafters/dflash",
)


def test_vllm_config_per_method() -> None:
    assert PoolSpeculation.parse("none").vllm_args() == []
    assert PoolSpeculation.parse("ngram:4").vllm_config() == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1,
        "prompt_lookup_max": 4}  # the window the measured acceptance used
    assert PoolSpeculation.parse("ngram:4,prompt_lookup_max=3").vllm_config() == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 3,
        "prompt_lookup_max": 3}  # vLLM's rule: a missing bound takes the other's value
    assert PoolSpeculation.parse("suffix:8").vllm_config() == {
        "method": "suffix", "num_speculative_tokens": 8}
    cfg = PoolSpeculation.parse("suffix:8,suffix_decoding_min_token_prob=0.2").vllm_config()
    assert cfg == {"method": "suffix", "num_speculative_tokens": 8,
                   "suffix_decoding_min_token_prob": 0.2}
    assert PoolSpeculation.parse("eagle3:2,model=/d").vllm_config() == {
        "method": "eagle3", "num_speculative_tokens": 2, "model": "/d"}
    argv = PoolSpeculation.parse("mtp:3").vllm_args()
    assert argv[0] == "--speculative-config" and json.loads(argv[1])["method"] == "mtp"


def test_sglang_flags_per_method() -> None:
    assert PoolSpeculation.parse("mtp:3").sglang_args() == [
        "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
    assert PoolSpeculation.parse("ngram:4").sglang_args() == [
        "--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "5",
        "--speculative-ngram-max-bfs-breadth", "1"]
    argv = PoolSpeculation.parse("eagle3:4,model=/d").sglang_args()
    assert argv[1] == "EAGLE3" and argv[-2:] == ["--speculative-draft-model-path", "/d"]
    with pytest.raises(ConfigError, match=r"SGLang has no speculative method 'suffix'.*ngram"):
        PoolSpeculation.parse("suffix:8").sglang_args()
    with pytest.raises(ConfigError, match="SGLang has no speculative method 'dflash'"):
        PoolSpeculation.parse("dflash:8,model=/d").sglang_args()


def test_bad_specs_are_one_line_errors() -> None:
    for text, match in (("fast:3", "unknown speculative method"), ("ngram", "needs a depth"),
                        ("ngram:x", "depth must be an integer"), ("none:3", "takes no"),
                        ("ngram:4,depth=3", "takes no option 'depth'"),
                        ("suffix:8,prompt_lookup_min=1", "takes no option"),
                        ("ngram:4,prompt_lookup_min=5,prompt_lookup_max=2", "prompt_lookup_min"),
                        ("ngram:4,prompt_lookup_min", "KEY=VALUE"),
                        ("suffix:8,suffix_decoding_max_tree_depth=deep", "not a int"),
                        ("ngram:0", "depth >= 1")):
        with pytest.raises(ConfigError, match=match):
            PoolSpeculation.parse(text)
    # a drafter-model method needs its weights on a real engine, not on an emulated replica
    eagle = PoolSpeculation.parse("eagle:3")
    assert eagle.spec_config().method is SpecMethod.EAGLE
    for build in (eagle.vllm_args, eagle.sglang_args):
        with pytest.raises(ConfigError, match="needs its drafter"):
            build()


def test_launch_config_takes_the_new_methods() -> None:
    c = LaunchConfig(model="/m", replicas=2, tail_replicas=1, tail_spec="suffix:8",
                     bulk_spec="ngram:3", python="py")
    tail, bulk = c.command(1)[0], c.command(0)[0]
    assert json.loads(tail[tail.index("--speculative-config") + 1])["method"] == "suffix"
    assert json.loads(bulk[bulk.index("--speculative-config") + 1])["prompt_lookup_max"] == 4
    with pytest.raises(ConfigError, match="unknown speculative method"):
        LaunchConfig(model="/m", tail_spec="fastest:3")


@given(st.sampled_from([m for m in METHODS if m != "none"]), st.integers(1, 32))
def test_depth_reaches_both_engines(method: str, depth: int) -> None:
    spec = PoolSpeculation.parse(f"{method}:{depth},model=/d")
    assert spec.vllm_config()["num_speculative_tokens"] == depth  # type: ignore[index]
    if method in ("mtp", "eagle", "eagle3", "ngram"):
        argv = spec.sglang_args()
        assert argv[argv.index("--speculative-num-draft-tokens") + 1] == str(depth + 1)
    # the throughput model always has a stand-in
    assert spec.spec_config().num_speculative_tokens == depth


VLLM_CHECK = textwrap.dedent('''
    import dataclasses, importlib, json, subprocess, sys
    from vllm.config import SpeculativeConfig
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    for mod in ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"):
        try:
            make_arg_parser = importlib.import_module(mod).make_arg_parser
            break
        except ImportError:
            continue
    parser = make_arg_parser(FlexibleArgumentParser())
    fields = {f.name for f in dataclasses.fields(SpeculativeConfig)}
    out = {"fields_ok": {}, "parsed": {}, "built": {}}
    for argv in json.loads(sys.argv[1]):
        ns = parser.parse_args(["--model", "/m", *argv])  # exits 2 on an unknown flag
        cfg = ns.speculative_config
        out["parsed"][argv[1]] = cfg
        out["fields_ok"][argv[1]] = sorted(set(cfg) - fields)
        if cfg["method"] in ("ngram", "suffix"):  # no drafter model to load: build it
            try:
                SpeculativeConfig(**cfg)
                out["built"][argv[1]] = "ok"
            except Exception as exc:  # suffix needs arctic-inference
                out["built"][argv[1]] = f"{type(exc).__name__}: {exc}"
    try:
        parser.parse_args(["--model", "/m", "--speculative-confg", "{}"])
        out["typo_rejected"] = False
    except SystemExit:
        out["typo_rejected"] = True
    print("RESULT " + json.dumps(out))
''')


@pytest.mark.slow
@pytest.mark.skipif(not VLLM_PYTHON.exists(),
                    reason="needs the vLLM venv (TAILSIEVE_VLLM_PYTHON)")
def test_every_flag_is_accepted_by_vllms_own_parser(tmp_path: Path) -> None:
    argvs = [PoolSpeculation.parse(t).vllm_args() for t in EXAMPLES]
    script = tmp_path / "check.py"
    script.write_text(VLLM_CHECK)
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"}
    res = subprocess.run([str(VLLM_PYTHON), str(script), json.dumps(argvs)], capture_output=True,
                         text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("RESULT "))
    out = json.loads(line.removeprefix("RESULT "))
    assert out["typo_rejected"]  # the parser does reject what it does not know
    for argv in argvs:
        assert out["parsed"][argv[1]] == json.loads(argv[1])  # vLLM reads our JSON as is
        assert out["fields_ok"][argv[1]] == []  # every key is a SpeculativeConfig field
    built = out["built"]
    assert built[PoolSpeculation.parse("ngram:4").vllm_args()[1]] == "ok"
    suffix = built[PoolSpeculation.parse("suffix:8").vllm_args()[1]]
    assert suffix == "ok" or "rctic" in suffix  # arctic-inference missing: vLLM says so
    # and the server's own --help lists the flag
    helped = subprocess.run([str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server",
                             "--help"], capture_output=True, text=True, timeout=300, env=env)
    assert "--speculative-config" in helped.stdout


@pytest.mark.slow
@pytest.mark.skipif(SGLANG_PYTHON is None,
                    reason="SGLang is not installed here (set TAILSIEVE_SGLANG_PYTHON)")
def test_every_flag_is_listed_by_sglangs_help() -> None:
    helped = subprocess.run([str(SGLANG_PYTHON), "-m", "sglang.launch_server", "--help"],
                            capture_output=True, text=True, timeout=300)
    for text in EXAMPLES:
        spec = PoolSpeculation.parse(text)
        if spec.method in ("suffix", "dflash"):
            continue
        for flag in spec.sglang_args()[::2]:
            assert flag in helped.stdout, flag
