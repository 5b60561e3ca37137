"""``tailsieve profile``: write a profile JSON, measured from a live replica (``--endpoint``)
or derived from a model's config.json and a GPU (``--from-config`` / ``--model`` with ``--gpu``)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from tailsieve.cli import checks
from tailsieve.errors import ConfigError
from tailsieve.model.decode_model import DecodeModel, Efficiencies
from tailsieve.model.derive import (
    SHIPPED_CONFIGS,
    derive_profile,
    shipped_config,
    shipped_config_source,
)
from tailsieve.model.gpu_spec import GPUS, gpu_spec
from tailsieve.model.model_config import ModelConfig
from tailsieve.model.throughput import ThroughputModel
from tailsieve.runtime.profile_fit import ProfileResult, mean_profile
from tailsieve.runtime.profiler import ProfileSettings, profile_endpoints


def _batch_sizes(text: str, flag: str = "--batch-sizes") -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"{flag} must be comma-separated integers, got {text!r}") from None


def _efficiencies(items: list[str] | None) -> Efficiencies:
    """``Efficiencies`` with ``KEY=VALUE`` overrides (error names an unknown key or value)."""
    eff = Efficiencies()
    fields = eff.to_dict()
    changes: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in fields:
            raise ConfigError(f"--efficiency {item!r}: expected KEY=VALUE with KEY one of "
                              f"{', '.join(fields)}")
        try:
            num = float(value)
        except ValueError:
            raise ConfigError(f"--efficiency {key}: {value!r} is not a number") from None
        changes[key] = int(num) if isinstance(fields[key], int) else num
    return replace(eff, **changes) if changes else eff


def profile(
    endpoint: Annotated[
        list[str] | None,
        typer.Option(
            "--endpoint",
            help="Replica base URL (http://host:port). Repeat it to measure several replicas "
            "in lockstep; the profile written is then their mean.",
        ),
    ] = None,
    from_config: str = typer.Option(
        None, "--from-config", help="Derive instead of measuring: a Hugging Face config.json."),
    gpu: str = typer.Option(
        "h100", "--gpu", help=f"GPU of the derived profile: {', '.join(GPUS)}."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel GPUs per replica (derived)."),
    efficiency: Annotated[
        list[str] | None,
        typer.Option("--efficiency", help="Override a decode-model efficiency, KEY=VALUE "
                     "(derived; repeatable; see docs/performance-model.md)."),
    ] = None,
    context_lengths: str = typer.Option(
        "", "--context-lengths", help="Prompt lengths (tokens, comma list) of the sweep that "
        "fits the context term k at a fixed batch (measured; e.g. 256,1024)."),
    context_batch: int = typer.Option(
        8, "--context-batch", help="Concurrent requests of the k sweep (measured)."),
    batch_sizes: str = typer.Option("1,2,4,8,16,32", "--batch-sizes", help="Comma list."),
    tokens: int = typer.Option(200, "--tokens", help="Tokens per request (ignore_eos)."),
    out: str = typer.Option(None, "--out", help="Write the profile JSON here (else stdout)."),
    model: str = typer.Option(
        None, "--model", help="With --endpoint: the served model name (default: from "
        f"/v1/models). Otherwise a shipped config to derive from: {', '.join(SHIPPED_CONFIGS)}."),
    name: str = typer.Option(None, "--name", help="Profile name (default: measured-MODEL)."),
    prompt: str = typer.Option("hello", "--prompt", help="Prompt text of every request."),
    timeout_s: float = typer.Option(600.0, "--timeout", help="Limit per batch, seconds."),
    repeats: int = typer.Option(1, "--repeats", help="Rounds per batch size (median)."),
) -> None:
    """Write a throughput profile: measured from live replicas or derived from a model.

    Measured (`--endpoint URL`): sweep batch sizes with concurrent requests and record seconds
    per decode step; `--context-lengths` also fits the context term k. With several
    `--endpoint`s every round runs on all of them at once (the load of a rollout step on a
    shared machine); the file holds their mean plus each one under `per_endpoint`.

    Derived (`--from-config CONFIG.json` or `--model NAME`, with `--gpu` and `--tp`): the
    decode model (docs/performance-model.md) from the model's architecture and the GPU's datasheet, with the
    KV capacity and provenance. The output loads with `--profile FILE` wherever a profile is
    accepted."""
    checks.output_files((Path(out) if out else None, "--out"))
    if not endpoint:
        if from_config is None and model is None:
            raise ConfigError("give --endpoint URL (measure) or --from-config CONFIG.json / "
                              "--model NAME (derive)")
        _derive(from_config, model, gpu, tp, _efficiencies(efficiency), name, out)
        return
    if from_config is not None:
        raise ConfigError("--from-config derives a profile; it cannot be combined with --endpoint")
    settings = [
        ProfileSettings(endpoint=e.rstrip("/"), batch_sizes=_batch_sizes(batch_sizes),
                        tokens=tokens, model=model, prompt=prompt, timeout_s=timeout_s,
                        repeats=repeats,
                        context_lengths=_batch_sizes(context_lengths, "--context-lengths"),
                        context_batch=context_batch)
        for e in endpoint
    ]
    names = [name if len(settings) == 1 else None for _ in settings]
    results = asyncio.run(profile_endpoints(settings, names))
    tables = [_table(st.endpoint, r) for st, r in zip(settings, results, strict=True)]
    if len(results) == 1:
        data = results[0].to_dict()
    else:
        mean = mean_profile(results, name or results[0].model.name)
        data = mean.to_dict()
        data["per_endpoint"] = [
            {"endpoint": st.endpoint, **r.to_dict()}
            for st, r in zip(settings, results, strict=True)
        ]
    text = json.dumps(data, indent=2) + "\n"
    console = Console(stderr=out is None)
    for t in tables:
        console.print(t)
    for st, r in zip(settings, results, strict=True):
        if r.context_measurements:
            fit = r.model.provenance.get("fit", {})
            console.print(f"{st.endpoint}: k = {r.model.context_s_per_token * 1e9:.2f} ns per "
                          f"context token; a0 = {fit.get('a0_s', 0.0) * 1e3:.3f} ms, c_s = "
                          f"{fit.get('c_s_per_request', 0.0) * 1e6:.2f} us per request")
    _emit(text, out)


def _emit(text: str, out: str | None) -> None:
    """Print ``text``, or write it to ``out`` (its folder made) and say so."""
    if out is None:
        print(text, end="")
        return
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"wrote {out}")


def _derive(from_config: str | None, model: str | None, gpu: str, tp: int, eff: Efficiencies,
            name: str | None, out: str | None) -> None:
    if from_config is not None and model is not None:
        raise ConfigError("give either --from-config or --model, not both")
    if from_config is not None:
        cfg = ModelConfig.load(from_config)
        config_source = f"config file {from_config}"
    else:
        assert model is not None
        cfg = shipped_config(model)
        config_source = shipped_config_source(cfg.name)
    prof = derive_profile(cfg, gpu, tp, eff, name=name, config_source=config_source)
    text = json.dumps(prof.to_dict(), indent=2) + "\n"
    console = Console(stderr=out is None)
    console.print(derived_table(prof, DecodeModel(cfg, gpu_spec(gpu), tp, eff)))
    _emit(text, out)


def derived_table(prof: ThroughputModel, dm: DecodeModel) -> Table:
    """The derived numbers of a profile, one per row."""
    table = Table(title=f"derived profile '{prof.name}'")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    m = dm.model
    rows = [
        ("parameters (total / active)", f"{m.total_params / 1e9:.2f} B / {m.active_params / 1e9:.2f} B"),
        ("weights per GPU", f"{dm.weight_bytes_per_gpu / 1e9:.2f} GB"),
        ("KV bytes per token (per GPU)", f"{dm.kv_bytes_per_token_per_gpu:,.0f}"),
        ("a0 (fixed per step)", f"{dm.a0_s * 1e3:.3f} ms"),
        ("tau(1, 0)", f"{prof.tau(1) * 1e3:.3f} ms ({1 / prof.tau(1):.0f} tok/s)"),
        ("tau(64, 0)", f"{prof.tau(64) * 1e3:.3f} ms"),
        ("tau(64, 64 x 2048)", f"{prof.step_s(64, 64 * 2048) * 1e3:.3f} ms "
                               f"({1 / prof.step_s(64, 64 * 2048):.0f} tok/s per request)"),
        ("k (per context token)", f"{prof.context_s_per_token * 1e9:.2f} ns"),
        ("c_s (per request)", f"{dm.c_s_per_request * 1e6:.2f} us"),
        ("KV capacity", f"{prof.kv_capacity_tokens:,} tokens"),
        ("max_num_seqs (vLLM default)", f"{prof.max_num_seqs}"),
    ]
    if prof.prefill is not None:
        pre = prof.prefill
        rows.append(("prefill per token (+ attention per pair)",
                     f"{pre.s_per_token * 1e6:.2f} us (+ {pre.s_per_token_pair * 1e12:.1f} ps)"))
        rows.append(("prefill, 2k / 8k-token prompt",
                     f"{pre.tokens_per_s(2048):,.0f} / {pre.tokens_per_s(8192):,.0f} tok/s"))
    if m.num_linear_attention_layers:
        rows.append(("linear-attention state per sequence",
                     f"{m.linear_state_bytes_per_seq / 1e6:.1f} MB "
                     f"(= {dm.state_tokens_per_seq:.0f} KV tokens)"))
    for q, v in rows:
        table.add_row(q, v)
    return table


def _table(endpoint: str, result: ProfileResult) -> Table:
    table = Table(title=f"profile '{result.model.name}' from {endpoint}")
    for col in ("batch", "ms/step", "first..last done ms", "tok/s per request", "overhead ms",
                "wall s"):
        table.add_column(col, justify="right")
    for m in result.measurements:
        table.add_row(str(m.batch_size), f"{m.step_s * 1e3:.3f}",
                      f"{m.first_done_step_s * 1e3:.2f}..{m.last_done_step_s * 1e3:.2f}",
                      f"{1 / m.step_s:.0f}", f"{m.overhead_s * 1e3:.1f}", f"{m.wall_s:.2f}")
    return table
