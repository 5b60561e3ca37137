"""Analytics: variance decomposition, AUC, tail AUC, truncation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tailsieve.workload.analytics import (
    auc,
    cross_checkpoint_auc,
    infer_truncation_cap,
    split_half_auc,
    tail_auc,
    truncated_fraction,
    variance_decomposition,
)
from tailsieve.workload.trace import Trace


def _balanced(p: int, s: int, r: int, seed: int) -> tuple[Trace, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(1, 5000, size=(p, s, r))
    codes, steps, samples = (
        a.ravel() for a in np.meshgrid(range(p), range(s), range(r), indexing="ij")
    )
    tr = Trace.from_columns(
        prompt_id=[f"p{c}" for c in codes], step=steps, sample=samples, response_tokens=y.ravel()
    )
    return tr, y.astype(float)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_variance_decomposition_matches_brute_force(seed: int) -> None:
    p, s, r = 7, 4, 3
    tr, y = _balanced(p, s, r, seed)
    vd = variance_decomposition(tr)
    grand = y.mean()
    ss_t = ss_p = ss_s = ss_i = ss_e = 0.0
    for i, j, k in itertools.product(range(p), range(s), range(r)):
        pm, sm, cm = y[i].mean(), y[:, j].mean(), y[i, j].mean()
        ss_t += (y[i, j, k] - grand) ** 2
        ss_p += (pm - grand) ** 2
        ss_s += (sm - grand) ** 2
        ss_i += (cm - pm - sm + grand) ** 2
        ss_e += (y[i, j, k] - cm) ** 2
    for got, want in zip(
        (vd.total, vd.prompt, vd.checkpoint, vd.interaction, vd.sampling),
        (ss_t, ss_p, ss_s, ss_i, ss_e),
        strict=True,
    ):
        assert got == pytest.approx(want, rel=1e-9)
    assert vd.prompt + vd.checkpoint + vd.interaction + vd.sampling == pytest.approx(vd.total)
    assert sum(vd.shares().values()) == pytest.approx(1.0)


def test_variance_decomposition_unbalanced_sums_to_total() -> None:
    tr, _ = _balanced(6, 3, 4, 5)
    sub = tr.select(np.arange(tr.num_rows) % 5 != 0)
    for log in (False, True):
        vd = variance_decomposition(sub, log=log)
        assert vd.prompt + vd.checkpoint + vd.interaction + vd.sampling == pytest.approx(vd.total)


def test_auc_against_pairwise_count() -> None:
    rng = np.random.default_rng(3)
    scores = rng.integers(0, 10, 60).astype(float)  # many ties
    labels = rng.random(60) < 0.3
    pos, neg = scores[labels], scores[~labels]
    want = np.mean([(a > b) + 0.5 * (a == b) for a in pos for b in neg])
    assert auc(scores, labels) == pytest.approx(want)
    assert auc([1, 2, 3, 4], [0, 0, 1, 1]) == 1.0
    assert auc([4, 3, 2, 1], [0, 0, 1, 1]) == 0.0
    assert auc([1, 1, 1, 1], [0, 1, 0, 1]) == 0.5
    assert np.isnan(auc([1, 2], [0, 0]))


def test_tail_auc_constructed() -> None:
    # 10 prompts; step 0 mean = rank, step 1 identical order except prompts 8 and 9 swap with 0
    base = np.arange(10) * 100 + 100
    nxt = base.copy()
    nxt[[9, 0]] = nxt[[0, 9]]  # the longest prompt becomes the shortest
    rows = [
        (f"p{i}", s, k, int(v))
        for s, vals in ((0, base), (1, nxt))
        for i, v in enumerate(vals)
        for k in range(2)
    ]
    tr = Trace.from_columns(
        prompt_id=[r[0] for r in rows],
        step=[r[1] for r in rows],
        sample=[r[2] for r in rows],
        response_tokens=[r[3] for r in rows],
    )
    # top 10% at step 1 = prompt 0 (now longest), whose step-0 score is the lowest -> AUC 0
    assert tail_auc(tr, 0, 1, 0.1) == 0.0
    # top 20% at step 1 = prompts 0 and 8: scores 100 (rank 1) and 900 (rank 9) vs 8 negatives
    assert tail_auc(tr, 0, 1, 0.2) == pytest.approx((0 + 7) / 16)
    assert cross_checkpoint_auc(tr, 0.1) == [(0, 1, 0.0)]


def test_split_half_auc_perfect_when_persistent() -> None:
    vals = np.repeat(np.arange(20) * 10 + 10, 4)
    tr = Trace.from_columns(prompt_id=[f"p{i // 4}" for i in range(80)], response_tokens=vals)
    assert split_half_auc(tr, 0.1) == 1.0


def test_truncation_rules() -> None:
    tr = Trace.from_columns(prompt_id=["a"] * 6, response_tokens=[5, 9, 10, 10, 10, 3])
    assert infer_truncation_cap(tr.response_tokens) == 10
    assert truncated_fraction(tr) == (0.5, 10)
    assert truncated_fraction(tr, max_tokens=9) == (pytest.approx(4 / 6), 9)
    fr = Trace.from_columns(
        prompt_id=["a"] * 3, response_tokens=[1, 2, 3], finish_reason=["stop", "length", "stop"]
    )
    assert truncated_fraction(fr) == (pytest.approx(1 / 3), None)
    one = Trace.from_columns(prompt_id=["a"] * 3, response_tokens=[1, 2, 3])
    assert truncated_fraction(one) == (0.0, None)
