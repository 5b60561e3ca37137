"""Non-negative least squares: ``min ||A x - b||`` subject to ``x >= 0`` (Lawson and Hanson's
active-set method, as in their 1974 book, chapter 23). numpy only; used by the online fit of
the decode curve (``model.online_fit``), where every unknown is a time or an increment of one.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tailsieve.errors import ProfileError

FloatArray = npt.NDArray[np.float64]


def nnls(a: npt.ArrayLike, b: npt.ArrayLike, max_iter: int | None = None) -> FloatArray:
    """The ``x >= 0`` minimising ``||a @ x - b||``. Columns are scaled to unit norm inside
    (the answer does not depend on positive column scales), so unknowns of very different
    magnitudes (seconds per step, seconds per token of context) are solved together."""
    mat = np.asarray(a, dtype=np.float64)
    rhs = np.asarray(b, dtype=np.float64)
    if mat.ndim != 2 or rhs.ndim != 1 or mat.shape[0] != rhs.shape[0]:
        raise ProfileError(f"nnls: need a matrix (m, n) and a vector (m,), got {mat.shape} and "
                           f"{rhs.shape}")
    if not (np.all(np.isfinite(mat)) and np.all(np.isfinite(rhs))):
        raise ProfileError("nnls: the system has a non-finite entry")
    norms = np.linalg.norm(mat, axis=0)
    scale = np.where(norms > 0, norms, 1.0)
    mat = mat / scale
    # on the normal equations: ||A x - b||^2 = x'Gx - 2c'x + b'b, G and c are n x n and n
    y = _solve(mat.T @ mat, mat.T @ rhs, max_iter or 3 * mat.shape[1] + 10)
    return np.where(norms > 0, y / scale, 0.0)


def _solve(g: FloatArray, c: FloatArray, max_iter: int) -> FloatArray:
    """Lawson-Hanson on the normal equations ``G = A'A``, ``c = A'b``."""
    n = g.shape[0]
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    tol = 10 * np.finfo(float).eps * n * max(1.0, float(np.abs(g).max()))
    w = c - g @ x
    num_iter = 0
    while not passive.all() and np.max(np.where(passive, -np.inf, w)) > tol:
        j = int(np.argmax(np.where(passive, -np.inf, w)))
        passive[j] = True
        while True:
            num_iter += 1
            if num_iter > max_iter:
                raise ProfileError(f"nnls: no convergence in {max_iter} iterations")
            s = np.zeros(n)
            s[passive] = np.linalg.lstsq(g[np.ix_(passive, passive)], c[passive], rcond=None)[0]
            if np.all(s[passive] > 0):
                break
            bad = passive & (s <= 0)
            denom = x[bad] - s[bad]
            alpha = float(np.min(np.where(denom > 0, x[bad] / np.where(denom > 0, denom, 1.0),
                                          0.0)))
            x = x + alpha * (s - x)
            passive &= x > tol
            x[~passive] = 0.0
            if not passive[j]:
                return x  # the variable just freed cannot improve the fit (rounding): done
        x = s
        w = c - g @ x
    return x
