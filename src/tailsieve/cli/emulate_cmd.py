"""``tailsieve emulate``: run one emulated vLLM replica in the foreground."""

from __future__ import annotations

from dataclasses import replace

import typer

from tailsieve.errors import ConfigError
from tailsieve.model.acceptance import get_acceptance
from tailsieve.model.spec_engine import GATES, SpecEngine
from tailsieve.runtime.emulator.config import CRASH_MODES, EmulatorConfig
from tailsieve.runtime.emulator.runner import capacity_options, serve_forever


def emulate(
    port: int = typer.Option(8000, "--port", help="TCP port (0 = pick a free port)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
    profile: str = typer.Option("cpu", "--profile", help="Throughput profile: name or JSON file."),
    time_scale: float = typer.Option(
        1.0, "--time-scale", help="Real seconds per model second (0.01 = 100x faster)."
    ),
    max_num_seqs: int = typer.Option(
        None, "--max-num-seqs", help="Running-sequence cap (default: the profile's, else 256)."),
    kv_capacity: int = typer.Option(
        None, "--kv-capacity", help="KV-cache tokens; when full the newest request is preempted "
        "and recomputed (default: the profile's; 0 = unlimited)."),
    max_model_len: int = typer.Option(4096, "--max-model-len", help="Prompt + output limit."),
    prefill_s: float = typer.Option(0.0, "--prefill-s", help="Model seconds of prefill stall."),
    crash_after: float = typer.Option(
        None, "--crash-after", help="Crash this many real seconds after start."
    ),
    crash_mode: str = typer.Option(
        "exit", "--crash-mode", help="exit: the process dies (os._exit 70); close: stop serving."
    ),
    error_rate: float = typer.Option(0.0, "--error-rate", help="Probability of an HTTP 500."),
    slowdown: float = typer.Option(1.0, "--slowdown", help="Multiply every tau (straggler)."),
    scheduling_policy: str = typer.Option(
        "fcfs", "--scheduling-policy", help="vLLM's --scheduling-policy: fcfs, or priority "
        "(requests' priority field, lower first; preemption by priority)."),
    model_name: str = typer.Option("tailsieve-emulated", "--model-name", help="Served model id."),
    seed: int = typer.Option(0, "--seed", help="Seed of drawn lengths and injected errors."),
    length_median: float = typer.Option(
        256.0, "--length-median", help="Median drawn length (requests without ignore_eos)."
    ),
    length_sigma: float = typer.Option(1.0, "--length-sigma", help="Log-space sigma of lengths."),
    spec: str = typer.Option(
        None, "--spec", help="Speculate with this acceptance preset (seer, tlt-eagle-tree, "
                             "rhymerl-epoch, low, measured NAME:SOURCE; "
                             "docs/speculation-placement.md)."),
    spec_k: int = typer.Option(
        1, "--spec-k", help="With --spec: a group's responses on this server (sibling drafts)."),
    spec_price: float = typer.Option(
        1.0, "--spec-price", help="With --spec: multiply speculation's extra step cost."),
    spec_gate: str = typer.Option(
        "always", "--spec-gate", help="With --spec: always, or only at batch sizes where it "
                                      "pays (pays)."),
) -> None:
    """Serve vLLM's OpenAI endpoints with timing from a throughput profile (Ctrl-C stops).

    Prints `tailsieve-emulator listening on URL` once ready."""
    if crash_mode not in CRASH_MODES:
        raise ConfigError(f"--crash-mode must be one of {', '.join(CRASH_MODES)}")
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port must be in 0..65535, got {port}")
    config = EmulatorConfig.from_profile(
        profile, **capacity_options(max_num_seqs, kv_capacity), model_name=model_name,
        time_scale=time_scale, max_model_len=max_model_len, prefill_s=prefill_s, crash_after_s=crash_after,
        crash_mode=crash_mode, error_rate=error_rate, slowdown=slowdown, seed=seed,
        scheduling_policy=scheduling_policy,
        length_median_tokens=length_median, length_sigma=length_sigma,
    )
    if spec is not None:
        config = with_speculation(config, spec, spec_k, spec_price, spec_gate)
    try:
        serve_forever(config, host, port)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def with_speculation(config: EmulatorConfig, preset: str, k: int = 1, price: float = 1.0,
                     gate: str = "always") -> EmulatorConfig:
    """``config`` decoding with speculation: its throughput replaced by the speculating
    replica's (``model.spec_engine``), acceptance from ``preset`` at ``k`` co-located
    siblings."""
    if gate not in GATES:
        raise ConfigError(f"--spec-gate must be one of {', '.join(GATES)}, got {gate!r}")
    if k < 1:
        raise ConfigError(f"--spec-k must be >= 1, got {k}")
    engine = SpecEngine(get_acceptance(preset), price, gate)  # type: ignore[arg-type]
    return replace(config, throughput=engine.throughput(config.throughput, k))
