"""``tailsieve launch`` (start/stop local vLLM replicas) and ``tailsieve rollout`` (run live
TailSieve steps against endpoints and write the batches)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated, Any

import typer

from tailsieve.cli import checks
from tailsieve.errors import ConfigError
from tailsieve.model.profiles import check_profile
from tailsieve.runtime import event_loop
from tailsieve.runtime.cluster.spec import EngineGroup
from tailsieve.runtime.cluster.state import StateFileAddresses
from tailsieve.runtime.engine.backends import Backend, PromptInput, SamplingParams
from tailsieve.runtime.launch_run import serve_local, stop_launched
from tailsieve.runtime.launcher import LaunchConfig
from tailsieve.runtime.step.replay import ReplayLengths
from tailsieve.runtime.step.rollout_config import LIVE_PROFILE, RolloutConfig
from tailsieve.runtime.step.rollout_run import (
    RolloutRun,
    check_prompt_budget,
    rollout_budget,
    run_rollout,
)


def _ints(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ConfigError(f"expected a comma-separated list of integers, got {text!r}") from None


def launch(
    model: str = typer.Option(None, "--model", help="Model directory."),
    replicas: int = typer.Option(2, "--replicas", help="R: servers to start."),
    base_port: int = typer.Option(8101, "--base-port", help="Replica i listens on port P+i."),
    python: str = typer.Option(
        None,
        "--python",
        help="Python of the vLLM venv (default $TAILSIEVE_VLLM_PYTHON or 'python').",
    ),
    cores: str = typer.Option(None, "--cores", help="CPU build: one core per replica, e.g. 0,1."),
    gpus: str = typer.Option(None, "--gpus", help="GPU build: one device per replica, e.g. 0,1."),
    name: str = typer.Option("default", "--served-model-name", help="Served model name."),
    tail_spec: str = typer.Option("none", "--tail-spec", help="Tail pool speculation, e.g. mtp:3."),
    bulk_spec: str = typer.Option("none", "--bulk-spec", help="Bulk pool speculation."),
    tail_replicas: int = typer.Option(
        0, "--tail-replicas", help="m: last m replicas get --tail-spec."
    ),
    max_model_len: int = typer.Option(1024, "--max-model-len"),
    extra_args: str = typer.Option("", "--extra-args", help="Extra server flags (shell words)."),
    timeout_s: float = typer.Option(300.0, "--health-timeout", help="Seconds to wait for health."),
    log_dir: str = typer.Option(".cache/tailsieve-launch", "--log-dir"),
    state_file: str = typer.Option(None, "--state-file", help="Default <log-dir>/state.json."),
    detach: bool = typer.Option(False, "--detach", help="Exit once healthy, leave servers up."),
    stop: Annotated[
        Path | None, typer.Option("--stop", help="Stop the servers of this state file.")
    ] = None,
    use_ray: bool = typer.Option(False, "--ray", help="Place the servers as Ray actors."),
    address: str = typer.Option(
        "auto", "--address", help="--ray: Ray cluster address (auto | local | host:port)."
    ),
    placement: str = typer.Option(
        "spread", "--placement", help="--ray: spread replicas across nodes, or pack them."
    ),
    engines: str = typer.Option(
        None,
        "--engines",
        help="--ray: ENGINE[*COUNT][@PORT],... with vllm | sglang | emulated "
        "(default vllm*R at --base-port).",
    ),
    gpus_per_replica: int = typer.Option(
        0, "--gpus-per-replica", help="--ray: GPUs per replica (tensor parallel); 0 = CPU."
    ),
    cpus_per_replica: float = typer.Option(1.0, "--cpus-per-replica", help="--ray: CPUs each."),
    resource: str = typer.Option(
        None, "--resource", help="--ray: custom resource a CPU replica takes one unit of."
    ),
    max_restarts: int = typer.Option(3, "--max-restarts", help="--ray: restarts per server."),
    emulator_args: str = typer.Option(
        "", "--emulator-args", help="--ray: flags of emulated replicas, e.g. '--time-scale 0.1'."
    ),
    emulator_profile: str = typer.Option("cpu", "--emulator-profile", help="--ray: profile."),
    connect_timeout: float = typer.Option(
        30.0,
        "--connect-timeout",
        help="--ray, --stop: seconds to connect to the Ray cluster, else one error line.",
    ),
) -> None:
    """Start R vLLM servers (local, or as Ray actors with --ray), wait until healthy, print the
    endpoints; Ctrl-C stops them."""
    if stop is not None:
        pids = stop_launched(stop, connect_timeout)
        typer.echo(f"stopped pids {' '.join(map(str, pids))}")
        return
    if not model and not (use_ray and engines and set(_engine_names(engines)) == {"emulated"}):
        raise ConfigError("--model is required (or --stop STATEFILE)")
    if use_ray and engines:
        replicas = sum(g.count for g in EngineGroup.parse_list(engines, base_port))
    kw: dict[str, Any] = {} if python is None else {"python": python}
    cfg = LaunchConfig(
        model=model or "", replicas=replicas, base_port=base_port, cores=_ints(cores),
        gpus=tuple(gpus.split(",")) if gpus else None, served_model_name=name,
        tail_spec=tail_spec, bulk_spec=bulk_spec, tail_replicas=tail_replicas,
        max_model_len=max_model_len, extra_args=tuple(shlex.split(extra_args)),
        health_timeout_s=timeout_s, log_dir=log_dir, state_file=state_file, **kw,
    )  # fmt: skip
    if use_ray:
        from tailsieve.cli.ray_launch import launch_ray

        launch_ray(
            cfg, EngineGroup.parse_list(engines or f"vllm*{replicas}", base_port), address,
            placement, gpus_per_replica, cpus_per_replica, resource, max_restarts,
            emulator_profile, tuple(shlex.split(emulator_args)), detach, connect_timeout,
        )  # fmt: skip
        return
    serve_local(cfg, detach, _say)


def _say(line: str, err: bool) -> None:
    typer.echo(line, err=err)


def _engine_names(text: str) -> list[str]:
    return [p.split("@")[0].split("*")[0].strip().lower() for p in text.split(",") if p.strip()]


def rollout(
    endpoints: str = typer.Option(None, "--endpoints", help="Comma-separated server URLs."),
    state: Annotated[
        Path | None, typer.Option("--state", help="Take endpoints from a launch state file.")
    ] = None,
    prompts: Annotated[
        Path | None,
        typer.Option("--prompts", help="JSONL: prompt_id + prompt | prompt_token_ids | messages."),
    ] = None,
    replay_trace: Annotated[
        Path | None, typer.Option("--replay-trace", help="Force lengths from a trace (or aime, smollm2-math: shipped).")
    ] = None,
    length_scale: float = typer.Option(1.0, "--length-scale", help="Replay: length factor."),
    groups: int = typer.Option(8, "--groups", help="N: groups per batch."),
    group_size: int = typer.Option(8, "--group-size", help="n: responses per group."),
    steps: int = typer.Option(4, "--steps", help="Steps to run (then a flush step)."),
    policy: str = typer.Option(
        "tailsieve", "--policy",
        help="tailsieve | tailsieve-fixed | tailsieve-static (with --q0, --m0) | uniform | "
        "uniform-requests."
    ),
    profile: str = typer.Option(
        LIVE_PROFILE, "--profile",
        help="Controller's cost model: auto (fitted online from the rollout's timings, after a "
        "short probe), auto:NAME (fitted online, the named profile or file until then), or a "
        "profile name or file (fixed).",
    ),
    backend: Annotated[Backend, typer.Option("--backend")] = Backend.VLLM,
    model: str = typer.Option(
        None, "--model", help="Served model name (default: the one the servers serve)."
    ),
    max_tokens: int = typer.Option(256, "--max-tokens", help="Cap per response (and replay clip)."),
    temperature: float = typer.Option(1.0, "--temperature"),
    seed: int = typer.Option(None, "--seed", help="Base sampling seed."),
    split: bool = typer.Option(
        True, "--split/--no-split",
        help="n single requests per group; --no-split: one request with n (needs --no-moves, or "
        "a policy that does not move; a group dealt over several replicas is n requests).",
    ),
    stream: bool = typer.Option(False, "--stream/--no-stream"),
    stream_interval: int = typer.Option(
        None, "--stream-interval", min=1,
        help="With --stream on vLLM: tokens per streamed chunk (vLLM's stream_interval). A move "
        "keeps what was streamed; 64 costs the router about twice unstreamed pieces of 512.",
    ),
    moves: bool = typer.Option(
        True, "--moves/--no-moves",
        help="Policy tailsieve on vLLM or SGLang: move running responses between replicas "
        "while a step runs (continuation; the balance gate turns moves off for steps where "
        "they are not measured to pay). --no-moves: each response one request, round-robin.",
    ),
    continuation: bool = typer.Option(
        None, "--continuation/--no-continuation", show_default="on when moves run",
        help="Responses as chains of pieces: a fault loses only the work since the last seam.",
    ),
    piece_tokens: int = typer.Option(
        None, "--piece-tokens", help="Continuation: max tokens per piece (seams every so often; "
        "default with moves on vLLM, unstreamed: 512, since a move waits for the piece end)."
    ),
    seam_s: float = typer.Option(
        None, "--seam-s", help="Moves: cost of one move beyond its prefill (seconds)."
    ),
    drain_priority: bool = typer.Option(
        False, "--drain-priority",
        help="Moves: each piece of a balanced step carries an engine priority by its tokens so "
        "far (the responses that ran longest first; docs/balancer.md#the-drain). vLLM only, "
        "and every server must run with --scheduling-policy priority: checked with one "
        "1-token request per replica before the first step.",
    ),
    request_timeout: float = typer.Option(3600.0, "--request-timeout"),
    q0: int = typer.Option(None, "--q0"),
    m0: int = typer.Option(None, "--m0"),
    flush: bool = typer.Option(True, "--flush/--no-flush", help="Drain carried prompts at end."),
    progress: bool = typer.Option(False, "--progress/--no-progress"),
    metrics_port: int = typer.Option(None, "--metrics-port", help="Prometheus on 127.0.0.1."),
    log_file: Annotated[
        Path | None, typer.Option("--log-file", help="JSON step log (default stderr).")
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="Output folder.")] = Path("out/rollout"),
) -> None:
    """Run live TailSieve steps; write DIR/batches/step_XXXX.jsonl, steps.jsonl, summary.json.

    The router runs on uvloop when it is installed (tailsieve\\[fast] extra), else on asyncio's loop; TAILSIEVE_EVENT_LOOP=asyncio forces asyncio's loop."""
    # every file argument is checked before a replica is contacted or an output is written
    urls = checks.state_endpoints(state) if state is not None else _endpoints(endpoints)
    replay = None
    if replay_trace is not None:
        replay = ReplayLengths.from_file(
            replay_trace, length_scale=length_scale, max_tokens=max_tokens
        )
    source, where = _prompt_source(prompts, replay, replay_trace)
    check_profile(profile)
    ctrl: dict[str, object] = {k: v for k, v in (("q0", q0), ("m0", m0), ("seam_s", seam_s))
                               if v is not None}
    if drain_priority:
        ctrl["drain_priority"] = True
    cfg = RolloutConfig(
        num_groups=groups, group_size=group_size, policy=policy, backend=backend, model=model,
        sampling=SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed),
        replay=replay, profile=profile, split_groups=split, stream=stream,
        stream_interval=stream_interval, request_timeout_s=request_timeout, controller=ctrl,
        moves=moves, piece_tokens=piece_tokens,
        continuation=True if piece_tokens is not None and continuation is None else continuation,
    )  # fmt: skip
    check_prompt_budget(where, len(source), rollout_budget(cfg, len(urls), steps), policy)
    checks.output_dir(out)
    if log_file is not None:
        checks.output_file(log_file, "--log-file")
    if metrics_port is not None:
        checks.tcp_port(metrics_port, "--metrics-port")
    run = RolloutRun(steps, flush, progress, metrics_port, log_file)
    provider = StateFileAddresses(state) if state is not None else None
    summary = event_loop.run(  # uvloop when installed (tailsieve[fast]): less router CPU
        run_rollout(urls, cfg, source, out, run, provider, lambda s: typer.echo(s, err=True))
    )
    keys = ("policy", "num_steps", "total_makespan_s", "num_delivered_groups")
    typer.echo(json.dumps({k: summary[k] for k in keys}))


def _prompt_source(
    prompts: Path | None, replay: ReplayLengths | None, replay_trace: Path | None
) -> tuple[list[PromptInput], str]:
    """The prompts of a run and where they come from (for the budget's error)."""
    if prompts is not None:
        return checks.read_prompts(prompts), str(prompts)
    if replay is not None:
        return replay.prompts(), f"--replay-trace {replay_trace}"
    raise ConfigError("give --prompts FILE or --replay-trace FILE")


def _endpoints(endpoints: str | None) -> list[str]:
    if not endpoints:
        raise ConfigError("give --endpoints URL,URL or --state FILE")
    urls = [u.strip() for u in endpoints.split(",") if u.strip()]
    if not urls:
        raise ConfigError(f"--endpoints {endpoints!r}: no URL")
    return urls
