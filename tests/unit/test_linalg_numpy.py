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
        a, b, c = big[:m, :k], big[m : m + k, k : k + n], big[:m, k + n : k + 2 * n]
        want = 0.5 * a @ b - 2.0 * c
        linalg.gemm(a, b, c, alpha=0.5, beta=-2.0)
        np.testing.assert_allclose(c, want, rtol=1e-12, atol=1e-12)
        tri = rng.standard_normal((m, m)) + 3 * m * np.eye(m)
        rhs = rng.standard_normal((m, n))
        lower, trans = bool(rng.integers(2)), bool(rng.integers(2))
        op = np.tril(tri) if lower else np.triu(tri)
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
        np.testing.assert_allclose(
            np.tril(factor) @ np.tril(factor).T, spd, rtol=1e-10, atol=1e-8
        )
        x, y, out = rng.standard_normal(k), rng.standard_normal(k), np.zeros(1)
        linalg.dot(x, y, out)
        assert out[0] == pytest.approx(float(x @ y))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_trtri_inverts_one_triangle_and_keeps_the_other(dtype, lower, unit):
    rng = np.random.default_rng(12)
    n = 7
    a = (rng.standard_normal((n, n)) + 4 * np.eye(n)).astype(dtype)
    before = a.copy()
    triangle = np.tril(a) if lower else np.triu(a)
    if unit:
        np.fill_diagonal(triangle, 1.0)
    info = np.full(1, -1, np.int32)
    linalg.trtri(a, lower=lower, unit_diagonal=unit, info=info)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    mine = np.tril(a) if lower else np.triu(a)
    if unit:
        np.fill_diagonal(mine, 1.0)
        np.testing.assert_array_equal(np.diagonal(a), np.diagonal(before))
    np.testing.assert_allclose(mine @ triangle, np.eye(n), atol=tol)
    np.testing.assert_allclose(
        mine, np.linalg.inv(triangle.astype(np.float64)), rtol=tol, atol=tol
    )
    other = np.triu_indices(n, 1) if lower else np.tril_indices(n, -1)
    np.testing.assert_array_equal(a[other], before[other])
    assert info[0] == 0


def test_trtri_of_a_singular_triangle_raises():
    a = np.tril(np.ones((4, 4)))
    a[2, 2] = 0.0
    with pytest.raises(np.linalg.LinAlgError, match=r"a\[2, 2\] is zero"):
        linalg.trtri(a)
    linalg.trtri(a, lower=False, unit_diagonal=True)  # the diagonal is not read


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("lower", [True, False])
def test_lauum_is_the_triangle_times_its_transpose(dtype, lower):
    rng = np.random.default_rng(13)
    n = 6
    big = rng.standard_normal((n + 2, n + 3)).astype(dtype)
    a = big[1 : n + 1, 2 : n + 2]  # a tile: row pitch n + 3
    before = a.copy()
    triangle = np.tril(before) if lower else np.triu(before)
    want = triangle.T @ triangle if lower else triangle @ triangle.T
    linalg.lauum(a, lower=lower)
    mine = np.tril(a) if lower else np.triu(a)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(
        mine, np.tril(want) if lower else np.triu(want), rtol=tol, atol=tol
    )
    other = np.triu_indices(n, 1) if lower else np.tril_indices(n, -1)
    np.testing.assert_array_equal(a[other], before[other])


def test_trtri_then_lauum_is_potri():
    rng = np.random.default_rng(14)
    r = rng.standard_normal((9, 9))
    spd = r @ r.T + 9 * np.eye(9)
    a = spd.copy()
    linalg.potrf(a)
    linalg.trtri(a)
    linalg.lauum(a)
    lower = np.tril(a)
    np.testing.assert_allclose(
        lower + np.tril(lower, -1).T, np.linalg.inv(spd), rtol=1e-10, atol=1e-12
    )


@pytest.mark.parametrize(
    "trans_a,trans_b", [(False, False), (True, False), (False, True), (True, True)]
)
def test_gemm_batched_matches_a_loop_of_products(trans_a, trans_b):
    rng = np.random.default_rng(15)
    count, m, n, k = 4, 3, 5, 2
    a = rng.standard_normal((count, k, m) if trans_a else (count, m, k))
    b = rng.standard_normal((count, n, k) if trans_b else (count, k, n))
    whole = rng.standard_normal((count, m + 1, n + 2))
    c = whole[:, 1:, 2:]  # matrices of a bigger batch
    before = c.copy()
    linalg.gemm_batched(a, b, c, alpha=0.5, beta=-1.0, trans_a=trans_a, trans_b=trans_b)
    for i in range(count):
        op_a = a[i].T if trans_a else a[i]
        op_b = b[i].T if trans_b else b[i]
        np.testing.assert_allclose(
            c[i], 0.5 * op_a @ op_b - before[i], rtol=1e-12, atol=1e-12
        )


def test_gemm_batched_with_one_shared_matrix():
    rng = np.random.default_rng(16)
    a = rng.standard_normal((3, 3))
    b = rng.standard_normal((6, 3, 2))
    c = np.zeros((6, 3, 2))
    linalg.gemm_batched(a, b, c)
    np.testing.assert_allclose(c, np.einsum("ij,bjk->bik", a, b), rtol=1e-12)
    d = np.zeros((6, 2, 3))
    linalg.gemm_batched(b, a, d, trans_a=True)
    np.testing.assert_allclose(d, np.swapaxes(b, 1, 2) @ a, rtol=1e-12)
