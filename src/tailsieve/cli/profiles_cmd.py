"""``tailsieve profiles``: list the shipped throughput profiles; ``profiles compare A B``."""

from __future__ import annotations

import json
from dataclasses import asdict

import typer
from rich.console import Console
from rich.table import Table

from tailsieve.model.profiles import list_profiles, load_profile
from tailsieve.model.throughput import ThroughputModel
from tailsieve.model.validation import ValidationRow, format_value, validation_rows

CONTEXT_PER_REQUEST = 2048  # tokens of context per request in the "b=64 at 2k" column
COMPARE_BATCHES: tuple[int, ...] = (1, 8, 32, 64, 128, 256)
COMPARE_CONTEXTS: tuple[int, ...] = (0, 1024, 4096, 16384)  # context tokens per request


profiles_app = typer.Typer(help="List the shipped throughput profiles; `compare A B`.",
                           invoke_without_command=True, no_args_is_help=False)


def summary(m: ThroughputModel) -> dict[str, object]:
    """The headline numbers of one profile (what the listing prints)."""
    b1 = m.step_s(1)
    b64 = m.step_s(64, 64 * CONTEXT_PER_REQUEST)
    return {
        "name": m.name,
        "b1_tokens_per_s": 1.0 / b1,
        "b64_ctx2k_tokens_per_s": 1.0 / b64,
        "b64_ctx2k_replica_tokens_per_s": 64.0 / b64,
        "k_ns_per_token": m.context_s_per_token * 1e9,
        "kv_capacity_tokens": m.kv_capacity_tokens,
        "max_num_seqs": m.max_num_seqs,
        "kind": m.provenance.get("kind", "measured" if m.name == "cpu" else "illustrative"),
    }


def profiles(
    ctx: typer.Context,
    show: str = typer.Option(None, "--show", help="Print one profile (name or file) as JSON."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """List the shipped throughput profiles: per-request speed at b=1 and at b=64 with 2k
    context per request, the context coefficient k, the KV capacity, and where each comes
    from."""
    if ctx.invoked_subcommand is not None:
        return
    if show:
        print(json.dumps(load_profile(show).to_dict(), indent=2))
        return
    models = list_profiles()
    if as_json:
        print(json.dumps([{**summary(m), "source": m.source} for m in models], indent=2))
        return
    table = Table(title="shipped throughput profiles (tok/s per request)")
    for col in ("profile", "b=1 tok/s", "b=64 @2k tok/s", "b=64 @2k replica tok/s",
                "k ns/token", "KV capacity", "max_num_seqs", "kind"):
        table.add_column(col, justify="left" if col in ("profile", "kind") else "right",
                         no_wrap=col == "profile")
    for m in models:
        s = summary(m)
        cap = s["kv_capacity_tokens"]
        table.add_row(
            m.name, f"{s['b1_tokens_per_s']:.0f}", f"{s['b64_ctx2k_tokens_per_s']:.1f}",
            f"{s['b64_ctx2k_replica_tokens_per_s']:.0f}", f"{s['k_ns_per_token']:.1f}",
            f"{cap:,}" if isinstance(cap, int) else "-",
            str(s["max_num_seqs"] or "-"), str(s["kind"]))
    console = Console(width=max(Console().width, 132))
    console.print(table)
    for m in models:
        console.print(f"[bold]{m.name}[/bold]: {m.source}")
    console.print("Details of one: tailsieve profiles --show NAME; two side by side: "
                  "tailsieve profiles compare A B")


def compare(
    a: str = typer.Argument(..., help="Profile name or file."),
    b: str = typer.Argument(..., help="Profile name or file."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """tau(b, C) of two profiles on a grid of batch sizes and context per request, and A/B."""
    ma, mb = load_profile(a), load_profile(b)
    rows = []
    for batch in COMPARE_BATCHES:
        for ctx_per_req in COMPARE_CONTEXTS:
            c = batch * ctx_per_req
            ta, tb = ma.step_s(batch, c), mb.step_s(batch, c)
            rows.append({"batch": batch, "context_per_request": ctx_per_req,
                         "tau_a_s": ta, "tau_b_s": tb, "ratio_a_over_b": ta / tb})
    if as_json:
        print(json.dumps({"a": ma.name, "b": mb.name, "rows": rows}, indent=2))
        return
    table = Table(title=f"tau(b, C): A = {ma.name}, B = {mb.name}")
    for col in ("batch", "context / request", "A ms", "B ms", "A / B"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["batch"]), f"{r['context_per_request']:,}",
                      f"{r['tau_a_s'] * 1e3:.3f}", f"{r['tau_b_s'] * 1e3:.3f}",
                      f"{r['ratio_a_over_b']:.3f}")
    Console().print(table)


def validate(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """The decode and prefill models against public measurements: Vidur's H100 GEMM timings,
    FlashAttention-3 paged decode on H100, published batch-1 and vLLM TPOT figures, and NIM's
    published time to first token (prefill)."""
    rows = validation_rows()
    if as_json:
        print(json.dumps([{**asdict(r), "off": r.off} for r in rows], indent=2))
        return
    console = Console()
    console.print(validation_table(rows))
    sources = list(dict.fromkeys(r.source for r in rows))
    for i, src in enumerate(sources, start=1):
        console.print(f"[{i}] {src}", highlight=False, markup=False)


def validation_table(rows: list[ValidationRow]) -> Table:
    """The validation rows as a table that stays readable at 100 columns: the numbers never
    shrink (no_wrap, minimum width), the case wraps, sources are numbered footnotes."""
    sources = list(dict.fromkeys(r.source for r in rows))
    table = Table(title="decode and prefill models vs public measurements", expand=False)
    table.add_column("part", overflow="fold", max_width=12)
    table.add_column("case", overflow="fold", ratio=1)
    for col in ("published", "model", "off"):
        table.add_column(col, justify="right", no_wrap=True, min_width=9 if col != "off" else 7)
    table.add_column("src", justify="right", no_wrap=True, min_width=3)
    for r in rows:
        small = r.measured < 1e-3
        table.add_row(r.part, r.case, format_value(r.measured, r.unit, small),
                      format_value(r.model, r.unit, small), f"{100 * r.off:+.1f}%",
                      f"[{sources.index(r.source) + 1}]")
    return table


profiles_app.callback(invoke_without_command=True)(profiles)
profiles_app.command("compare")(compare)
profiles_app.command("validate")(validate)
