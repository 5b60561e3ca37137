"""Independent exact reference: the 2-replica min-makespan problem as a MILP (HiGHS).

Lengths sorted descending; binary ``x_i`` = request i on replica A; binary ``y_ic`` = request i
is the c-th request on A (``z_ic`` likewise on B). ``sum_c y_ic = x_i`` and
``sum_c c*y_ic = sum_{j<=i} x_j`` (big-M, active when ``x_i = 1``) pin ``c`` to the rank, so the replica time is
``sum L_i (tau(c) - tau(c-1)) y_ic`` exactly, plus each request's own context cost
``k (P_i L_i + L_i^2 / 2)`` on the replica it is on. Shares nothing with the DP but ``tau``.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import lil_matrix

from tailsieve.model.throughput import ThroughputModel


def milp_makespan(
    lengths: np.ndarray,
    model: ThroughputModel,
    time_limit_s: float = 60.0,
    prompt_tokens: np.ndarray | None = None,
) -> float:
    raw = np.asarray(lengths, dtype=np.float64)
    order = np.argsort(-raw, kind="stable")
    ls = raw[order]
    ps = np.zeros(ls.size) if prompt_tokens is None else np.asarray(prompt_tokens, float)[order]
    own = model.context_s_per_token * (ps * ls + ls * ls / 2.0)
    n = ls.size
    taus = np.array([model.tau(b) for b in range(n + 1)])
    marg = np.diff(taus)  # marg[c-1] = tau(c) - tau(c-1)
    # variable layout: x (n), y (i, c) c=1..i+1 for i=0..n-1, z same, M
    pairs = [(i, c) for i in range(n) for c in range(1, i + 2)]
    ny = len(pairs)
    nv = n + 2 * ny + 1
    y0, z0, m_idx = n, n + ny, n + 2 * ny
    rows: list[tuple[dict[int, float], float, float]] = []

    def add(coefs: dict[int, float], lo: float, hi: float) -> None:
        rows.append((coefs, lo, hi))

    by_i: dict[int, list[int]] = {i: [] for i in range(n)}
    for p, (i, _c) in enumerate(pairs):
        by_i[i].append(p)
    for i in range(n):
        # sum_c y_ic = x_i ; sum_c z_ic = 1 - x_i
        add({**{y0 + p: 1.0 for p in by_i[i]}, i: -1.0}, 0.0, 0.0)
        add({**{z0 + p: 1.0 for p in by_i[i]}, i: 1.0}, 1.0, 1.0)
        # rank on A = s_i = sum_{j<=i} x_j when x_i = 1 (big-M off otherwise):
        #   sum_c c y_ic - s_i <= 0   and   sum_c c y_ic - s_i - big (x_i - 1) >= 0
        # rank on B = (i+1) - s_i when x_i = 0:
        #   sum_c c z_ic + s_i <= i+1 and   sum_c c z_ic + s_i + big x_i >= i+1
        big = float(n + 1)
        ca = {y0 + p: float(pairs[p][1]) for p in by_i[i]}
        cb = {z0 + p: float(pairs[p][1]) for p in by_i[i]}
        for j in range(i + 1):
            ca[j] = -1.0
            cb[j] = 1.0
        add(ca, -np.inf, 0.0)
        add({**ca, i: ca[i] - big}, -big, np.inf)
        add(cb, -np.inf, float(i + 1))
        add({**cb, i: cb[i] + big}, float(i + 1), np.inf)
    for base in (y0, z0):
        coefs = {base + p: ls[i] * marg[c - 1] + own[i] for p, (i, c) in enumerate(pairs)}
        coefs[m_idx] = -1.0
        add(coefs, -np.inf, 0.0)
    a = lil_matrix((len(rows), nv))
    lo = np.empty(len(rows))
    hi = np.empty(len(rows))
    for r, (coefs, lo_r, hi_r) in enumerate(rows):
        for j, v in coefs.items():
            a[r, j] = v
        lo[r], hi[r] = lo_r, hi_r
    c = np.zeros(nv)
    c[m_idx] = 1.0
    integrality = np.ones(nv)
    integrality[m_idx] = 0
    lb = np.zeros(nv)
    ub = np.ones(nv)
    ub[m_idx] = np.inf
    lb[0] = 1.0  # symmetry: the longest request on A
    res = milp(
        c,
        constraints=LinearConstraint(a.tocsr(), lo, hi),
        integrality=integrality,
        bounds=Bounds(lb, ub),
        options={"time_limit": time_limit_s, "mip_rel_gap": 1e-9},
    )
    assert res.status == 0, res.message
    return float(res.fun)
