"""The decode model against public measurements (figures and sources in
``tailsieve.model.validation``; the table is in docs/performance-model.md)."""

from __future__ import annotations

import pytest

from tailsieve.model.validation import (
    FA3_H100_US,
    NIM_LLAMA33_70B_TTFT_S,
    PUBLISHED_4B_H100_TOK_S,
    VIDUR_LLAMA2_7B_H100_LAYER_MS,
    VIDUR_OTHER_H100_LAYER_MS,
    ValidationRow,
    validation_rows,
)

ROWS = validation_rows()


def rows(part: str) -> list[ValidationRow]:
    return [r for r in ROWS if r.part == part]


def test_every_fixture_is_compared() -> None:
    assert len(rows("linear")) == len(VIDUR_LLAMA2_7B_H100_LAYER_MS)
    assert len(rows("attention")) == len(FA3_H100_US)
    assert len(rows("batch-1")) == 1 and len(rows("tpot")) == 2
    assert len(rows("prefill")) == len(NIM_LLAMA33_70B_TTFT_S)
    assert len(rows("linear (out of sample)")) == sum(
        len(t) for _, t in VIDUR_OTHER_H100_LAYER_MS.values())


@pytest.mark.parametrize("row", rows("linear"), ids=lambda r: r.case)
def test_linear_part_within_15pct_of_vidur_h100(row: ValidationRow) -> None:
    # Vidur's H100 Llama-2-7B mlp.csv, b = 1..1024 (the issue asks 1..512; 1024 holds too)
    assert abs(row.off) <= 0.15, f"{row.case}: model {row.model:.3e} s vs {row.measured:.3e} s"


@pytest.mark.parametrize("row", rows("linear (out of sample)"), ids=lambda r: r.case)
def test_linear_part_out_of_sample_is_conservative(row: ValidationRow) -> None:
    # larger layers (hidden 5120-8192) run their GEMMs more efficiently than Llama-2-7B's: the
    # model is up to 35% slow at b = 256, never more than 5% fast (docs/performance-model.md)
    assert -0.05 <= row.off <= 0.40, f"{row.case}: model {row.model:.3e} s vs {row.measured:.3e} s"


@pytest.mark.parametrize("row", rows("attention"), ids=lambda r: r.case)
def test_attention_within_10pct_of_fa3_paged_decode_h100(row: ValidationRow) -> None:
    assert abs(row.off) <= 0.10, f"{row.case}: model {row.model:.3e} s vs {row.measured:.3e} s"


def test_batch1_speed_of_a_4b_model_near_the_published_range() -> None:
    (row,) = rows("batch-1")
    lo, hi = PUBLISHED_4B_H100_TOK_S
    # the derived Qwen3-4B/H100 speed is 225 tok/s: 12.5% above the top of the published range
    assert lo * 0.85 <= row.model <= hi * 1.15
    assert row.measured == min(max(row.model, lo), hi)


@pytest.mark.parametrize("row", rows("tpot"), ids=lambda r: r.case)
def test_end_to_end_vllm_tpot_within_30pct(row: ValidationRow) -> None:
    # other GPUs, served by vLLM and timed at the client: the loosest check (see the docs)
    assert abs(row.off) <= 0.30, f"{row.case}: model {row.model:.3e} s vs {row.measured:.3e} s"


def test_prefill_against_nim_time_to_first_token() -> None:
    """NIM's Llama-3.3-70B fp8 TP2 on 2 x H100 at concurrency 1: the model (compute-bound at
    0.64 x the fp8 peak) is below the measured TTFT, which also holds the HTTP round trip,
    tokenization and scheduling; the per-token slope between the 500- and 5,000-token prompts
    (fixed costs cancel) is within 30% of the model's."""
    by_len = {int(r.case.split(", ")[1].split("-")[0].replace(",", "")): r
              for r in rows("prefill")}
    assert set(by_len) == set(NIM_LLAMA33_70B_TTFT_S)
    long, short = by_len[5000], by_len[500]
    assert -0.35 <= long.off < 0.0, long
    assert short.off < 0.0
    measured_slope = (long.measured - short.measured) / 4500
    model_slope = (long.model - short.model) / 4500
    assert abs(model_slope / measured_slope - 1) <= 0.30
