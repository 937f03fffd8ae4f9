"""stflow.linalg on NumPy arrays (the emulated backend's path) against plain NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from stflow import linalg


def test_random_shapes_and_tiles_match_numpy():
    """Every operation on random shapes, transposes and tile views (a row pitch larger
    than the row) against plain NumPy expressions."""
    rng = np.random.default_rng(11)
    for _ in range(40):
        m, n, k = (int(v) for v in rng.integers(1, 9, 3))
        big = rng.standard_normal((m + k + 3, k + 2 * n + 3))
        a, b, c = big[:m, :k], big[m:m + k, k:k + n], big[:m, k + n:k + 2 * n]
        want = 0.5 * a @ b - 2.0 * c
        linalg.gemm(a, b, c, alpha=0.5, beta=-2.0)
        np.testing.assert_allclose(c, want, rtol=1e-12, atol=1e-12)
        tri = rng.standard_normal((m, m)) + 3 * m * np.eye(m)
        rhs = rng.standard_normal((m, n))
        lower, trans = bool(rng.integers(2)), bool(rng.integers(2))
        op = (np.tril(tri) if lower else np.triu(tri))
        op = op.T if trans else op
        solved = rhs.copy()
        linalg.trsm(tri, solved, lower=lower, trans=trans)
        np.testing.assert_allclose(op @ solved, rhs, rtol=1e-10, atol=1e-10)
        product = rhs.copy()
        linalg.trmm(tri, product, lower=lower, trans=trans)
        np.testing.assert_allclose(product, op @ rhs, rtol=1e-12, atol=1e-12)
        spd = tri @ tri.T
        factor = spd.copy()
        linalg.potrf(factor)
        np.testing.assert_allclose(np.tril(factor) @ np.tril(factor).T, spd,
                                   rtol=1e-10, atol=1e-8)
        x, y, out = rng.standard_normal(k), rng.standard_normal(k), np.zeros(1)
        linalg.dot(x, y, out)
        assert out[0] == pytest.approx(float(x @ y))
