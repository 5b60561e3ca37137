"""``tailsieve launch`` (start/stop local vLLM replicas) and ``tailsieve rollout`` (run live
TailSieve steps against endpoints and write the batches)."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
import time
from pathlib import Path
from typing import IO, Annotated, Any

import typer

from tailsieve.cli import checks
from tailsieve.control.budget import PromptBudget, prompts_needed
from tailsieve.control.config import ControllerConfig
from tailsieve.errors import ConfigError
from tailsieve.model.profiles import check_profile
from tailsieve.runtime import event_loop
from tailsieve.runtime.backends import Backend, PromptInput, SamplingParams
from tailsieve.runtime.cluster.spec import EngineGroup
from tailsieve.runtime.cluster.state import StateFileAddresses
from tailsieve.runtime.launcher import LaunchConfig, VllmFleet, stop_from_state
from tailsieve.runtime.lean_http import LeanTransport
from tailsieve.runtime.observe import ProgressDisplay, RuntimeMetrics, StepLog
from tailsieve.runtime.replay import ReplayLengths
from tailsieve.runtime.rollout import (
    MOVING_POLICIES,
    RolloutBatch,
    RolloutConfig,
    TailSieveRollout,
)
from tailsieve.runtime.served_model import check_served_model, transport_getter


def register(app: typer.Typer) -> None:
    """Add ``launch`` and ``rollout`` to ``app``."""
    app.command("launch")(launch)
    app.command("rollout")(rollout)


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
        pids = _stop(stop, connect_timeout)
        typer.echo(f"stopped pids {' '.join(map(str, pids))}")
        return
    if not model and not (use_ray and engines and set(_engine_names(engines)) == {"emulated"}):
        raise ConfigError("--model is required (or --stop STATEFILE)")
    if use_ray and engines:
        replicas = sum(g.count for g in _engine_groups(engines, base_port))
    kw: dict[str, Any] = {} if python is None else {"python": python}
    cfg = LaunchConfig(
        model=model or "",
        replicas=replicas,
        base_port=base_port,
        cores=_ints(cores),
        gpus=tuple(gpus.split(",")) if gpus else None,
        served_model_name=name,
        tail_spec=tail_spec,
        bulk_spec=bulk_spec,
        tail_replicas=tail_replicas,
        max_model_len=max_model_len,
        extra_args=tuple(shlex.split(extra_args)),
        health_timeout_s=timeout_s,
        log_dir=log_dir,
        state_file=state_file,
        **kw,
    )
    if use_ray:
        from tailsieve.cli.ray_launch import launch_ray

        groups = _engine_groups(engines or f"vllm*{replicas}", base_port)
        launch_ray(
            cfg, groups, address, placement, gpus_per_replica, cpus_per_replica, resource,
            max_restarts, emulator_profile, tuple(shlex.split(emulator_args)), detach,
            connect_timeout,
        )  # fmt: skip
        return
    fleet = VllmFleet(cfg)
    fleet.start_processes()
    try:
        asyncio.run(fleet.wait_healthy())
        typer.echo(",".join(fleet.endpoints))
        typer.echo(f"state file: {cfg.state_path}", err=True)
        if detach:
            return
        typer.echo("serving; Ctrl-C stops all replicas", err=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        if not detach:
            fleet.stop()


def _engine_names(text: str) -> list[str]:
    return [p.split("@")[0].split("*")[0].strip().lower() for p in text.split(",") if p.strip()]


def _engine_groups(text: str, base_port: int) -> tuple[EngineGroup, ...]:
    return EngineGroup.parse_list(text, base_port)


def _stop(state: Path, connect_timeout_s: float = 30.0) -> list[int]:
    try:
        data = json.loads(state.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--stop {state}: cannot read the state file ({exc})") from None
    if "ray" in data:
        from tailsieve.runtime.cluster.stop import stop_from_ray_state

        return stop_from_ray_state(state, connect_timeout_s=connect_timeout_s)
    return stop_from_state(state)


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
        "auto", "--profile",
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
    split: bool = typer.Option(True, "--split/--no-split", help="n single requests per group."),
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
    if prompts is not None:
        source, where = checks.read_prompts(prompts), str(prompts)
    elif replay is not None:
        source, where = replay.prompts(), f"--replay-trace {replay_trace}"
    else:
        raise ConfigError("give --prompts FILE or --replay-trace FILE")
    check_profile(profile)
    ctrl = {k: v for k, v in (("q0", q0), ("m0", m0), ("seam_s", seam_s)) if v is not None}
    ccfg = ControllerConfig(
        num_groups=groups, num_replicas=len(urls), group_size=group_size, q0=q0, m0=m0
    )
    _check_budget(where, len(source), prompts_needed(policy, ccfg, steps), policy)
    checks.output_dir(out)
    if log_file is not None:
        checks.output_file(log_file, "--log-file")
    if metrics_port is not None:
        checks.tcp_port(metrics_port, "--metrics-port")
    cfg = RolloutConfig(
        num_groups=groups,
        group_size=group_size,
        policy=policy,
        backend=backend,
        model=model,
        sampling=SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed),
        replay=replay,
        profile=profile,
        split_groups=split,
        stream=stream,
        stream_interval=stream_interval,
        request_timeout_s=request_timeout,
        controller=ctrl,
        moves=moves,
        continuation=True if piece_tokens is not None and continuation is None else continuation,
        piece_tokens=piece_tokens,
    )
    if cfg.moves and cfg.policy in MOVING_POLICIES and not cfg.moves_active:
        typer.echo(f"note: moves are off: {cfg.moves_off_reason}", err=True)
    provider = StateFileAddresses(state) if state is not None else None
    event_loop.run(  # uvloop when installed (tailsieve[fast]): less router CPU per request
        _drive(urls, cfg, source, steps, flush, progress, metrics_port, log_file, out, provider)
    )


def _check_budget(where: str, num_prompts: int, budget: PromptBudget, policy: str) -> None:
    """Refuse a run whose prompts run out before its last step (see ``control.budget``)."""
    if num_prompts >= budget.num_needed:
        return
    n, steps = budget.num_groups, budget.num_steps
    extra = (
        f" and up to {budget.max_extra} extra groups that the {policy} policy launches in the "
        "last step and delivers in the flush step"
        if budget.max_extra
        else ""
    )
    fit = max(0, (num_prompts - budget.max_extra) // n)
    raise ConfigError(
        f"{where} has {num_prompts} prompts; --groups {n} x --steps {steps} needs at least "
        f"{budget.num_needed}: {budget.num_delivered} delivered ({n} per step){extra}; give at "
        f"least {budget.num_needed} prompts or at most --steps {fit}"
    )


def _endpoints(endpoints: str | None) -> list[str]:
    if not endpoints:
        raise ConfigError("give --endpoints URL,URL or --state FILE")
    urls = [u.strip() for u in endpoints.split(",") if u.strip()]
    if not urls:
        raise ConfigError(f"--endpoints {endpoints!r}: no URL")
    return urls


async def _check_model(urls: list[str], model: str | None, backend: Backend) -> None:
    """A given ``--model`` must be one the replicas list (the error names the replica)."""
    if model is None:
        return
    transport = LeanTransport()
    try:
        await check_served_model(transport_getter(transport.get), urls, model, backend)
    finally:
        await transport.aclose()


async def _drive(
    urls: list[str],
    cfg: RolloutConfig,
    source: list[PromptInput],
    steps: int,
    flush: bool,
    progress: bool,
    metrics_port: int | None,
    log_file: Path | None,
    out: Path,
    addresses: StateFileAddresses | None = None,
) -> None:
    await _check_model(urls, cfg.model, cfg.backend)
    metrics = RuntimeMetrics()
    display = ProgressDisplay() if progress else None
    batches: list[RolloutBatch] = []
    num_used = 0
    log_fh: IO[str] | None = None
    t0 = time.perf_counter()
    try:
        async with TailSieveRollout(
            urls,
            cfg,
            on_progress=display.update if display else None,
            metrics=metrics,
            addresses=addresses,
        ) as ro:
            # the replicas answer and serve the model: only now is anything written
            if metrics_port is not None:
                try:
                    await metrics.serve(metrics_port)
                except OSError as exc:
                    raise ConfigError(
                        f"--metrics-port {metrics_port}: cannot listen ({exc.strerror or exc})"
                    ) from None
            (out / "batches").mkdir(parents=True, exist_ok=True)
            (out / "steps.jsonl").write_text("")
            log_fh = log_file.open("a") if log_file is not None else None
            ro.step_log = StepLog(log_fh or sys.stderr)
            if display:
                display.__enter__()
            for _ in range(steps):
                need = ro.num_fresh_needed()
                new = source[num_used : num_used + need]
                if len(new) < need:  # not expected: the budget was checked up front
                    typer.echo(
                        f"warning: prompts ran out after {len(batches)} steps: step "
                        f"{len(batches)} needs {need}, {len(new)} left", err=True
                    )
                    break
                num_used += need
                batches.append(await ro.step(new))
                _write(out, batches[-1])
            if flush and (last := await ro.flush()) is not None:
                batches.append(last)
                _write(out, last)
    finally:
        if display:
            display.__exit__(None, None, None)
        if log_fh is not None:
            log_fh.close()
        await metrics.aclose()
    ms = [b.metrics for b in batches]
    summary = {
        "policy": cfg.policy,
        "endpoints": urls,
        "num_steps": len(ms),
        "num_groups": cfg.num_groups,
        "group_size": cfg.group_size,
        "wall_s": time.perf_counter() - t0,
        "total_makespan_s": sum(m.makespan_s for m in ms),
        "makespans_s": [m.makespan_s for m in ms],
        "steady_mean_makespan_s": _mean(
            [m.makespan_s for m in ms if m.step > 0 and not m.is_flush]
        ),
        "generated_tokens": sum(m.generated_tokens for m in ms),
        "wasted_tokens": sum(m.wasted_tokens for m in ms),
        "wasted_token_fraction": (sum(m.wasted_tokens for m in ms)
                                  / max(1, sum(m.generated_tokens for m in ms))),
        "estimated_wasted_tokens": sum(m.estimated_wasted_tokens for m in ms),
        "num_regenerated": sum(m.num_regenerated for m in ms),
        "num_relocated": sum(m.num_relocated for m in ms),
        "moves": cfg.moves_active,
        "moves_off_reason": cfg.moves_off_reason,
        "num_moves": sum(m.num_moves for m in ms),
        "moves_per_step": _mean([float(m.num_moves) for m in ms if not m.is_flush]),
        "q": [m.q for m in ms],
        "m": [m.m for m in ms],
        "num_delivered_groups": sum(m.num_groups for m in ms),
        "num_readmitted": max((m.num_readmitted for m in ms), default=0),
        "planned_replicas": [m.num_planned_replicas for m in ms],
        "num_prompts": len(source),
        "num_prompts_used": num_used,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    typer.echo(
        json.dumps(
            {
                k: summary[k]
                for k in ("policy", "num_steps", "total_makespan_s", "num_delivered_groups")
            }
        )
    )


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _write(out: Path, b: RolloutBatch) -> None:
    with (out / "batches" / f"step_{b.step:04d}.jsonl").open("w") as fh:
        for row in b.rows():
            fh.write(json.dumps(row) + "\n")
    with (out / "steps.jsonl").open("a") as fh:
        fh.write(b.metrics.to_json() + "\n")
