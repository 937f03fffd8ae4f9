"""stflow.linalg in task bodies: the same call on NumPy (emulated) and CUDA arrays, in
stream and graph mode (CuPy's own cuBLAS calls cannot be captured; these can), on
whole arrays and on tiles cut from a bigger matrix."""

from __future__ import annotations

import numpy as np
import pytest

import stflow as stf
from stflow import linalg

MODES = pytest.mark.parametrize("use_graph", [False, True], ids=["streams", "graph"])
DTYPES = pytest.mark.parametrize("dtype", [np.float64, np.float32])


def _tol(dtype):
    return (
        dict(rtol=1e-10, atol=1e-10)
        if dtype == np.float64
        else dict(rtol=2e-4, atol=2e-4)
    )


def _run(backend, use_graph, arrays, body, *modes):
    """Run ``body(xp, *arrays)`` in one task; returns the arrays after finalize."""
    with stf.context(backend=backend, use_graph=use_graph) as ctx:
        data = [ctx.logical_data(a) for a in arrays]
        deps = [getattr(d, mode)() for d, mode in zip(data, modes)]
        with ctx.task(*deps) as t:
            t.run(body)
    return arrays


@MODES
@DTYPES
@pytest.mark.parametrize(
    "trans_a,trans_b", [(False, False), (True, False), (False, True), (True, True)]
)
def test_gemm(backend, use_graph, dtype, trans_a, trans_b):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((7, 5) if trans_a else (5, 7)).astype(dtype)
    b = rng.standard_normal((3, 7) if trans_b else (7, 3)).astype(dtype)
    c = rng.standard_normal((5, 3)).astype(dtype)
    expected = 2.0 * ((a.T if trans_a else a) @ (b.T if trans_b else b)) - c
    _run(
        backend,
        use_graph,
        [a, b, c],
        lambda xp, a, b, c: linalg.gemm(
            a, b, c, alpha=2.0, beta=-1.0, trans_a=trans_a, trans_b=trans_b
        ),
        "read",
        "read",
        "rw",
    )
    np.testing.assert_allclose(c, expected, **_tol(dtype))


@MODES
@pytest.mark.parametrize("trans", [False, True])
def test_gemv(backend, use_graph, trans):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((6, 4))
    x = rng.standard_normal(6 if trans else 4)
    y = rng.standard_normal(4 if trans else 6)
    expected = 0.5 * ((a.T if trans else a) @ x) + 3.0 * y
    _run(
        backend,
        use_graph,
        [a, x, y],
        lambda xp, a, x, y: linalg.gemv(a, x, y, alpha=0.5, beta=3.0, trans=trans),
        "read",
        "read",
        "rw",
    )
    np.testing.assert_allclose(y, expected, rtol=1e-12)


@MODES
@pytest.mark.parametrize("trans", [False, True])
def test_syrk_writes_the_lower_triangle_only(backend, use_graph, trans):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 6) if trans else (6, 4))
    c = rng.standard_normal((6, 6))
    before = c.copy()
    full = -(a.T @ a if trans else a @ a.T) + before
    _run(
        backend,
        use_graph,
        [a, c],
        lambda xp, a, c: linalg.syrk(a, c, alpha=-1.0, beta=1.0, trans=trans),
        "read",
        "rw",
    )
    np.testing.assert_allclose(np.tril(c), np.tril(full), rtol=1e-12)
    np.testing.assert_array_equal(np.triu(c, 1), np.triu(before, 1))


@MODES
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize(
    "lower,trans", [(True, False), (True, True), (False, False), (False, True)]
)
def test_trsm(backend, use_graph, side, lower, trans):
    rng = np.random.default_rng(4)
    order = 5
    a = rng.standard_normal((order, order)) + 4 * np.eye(order)
    b = rng.standard_normal((order, 3) if side == "left" else (3, order))
    tri = np.tril(a) if lower else np.triu(a)
    op = tri.T if trans else tri
    expected = (
        np.linalg.solve(op, 2 * b) if side == "left" else np.linalg.solve(op.T, 2 * b.T).T
    )
    _run(
        backend,
        use_graph,
        [a, b],
        lambda xp, a, b: linalg.trsm(
            a, b, side=side, lower=lower, trans=trans, alpha=2.0
        ),
        "read",
        "rw",
    )
    np.testing.assert_allclose(b, expected, rtol=1e-10)


@MODES
def test_potrf_factors_in_place_and_keeps_the_upper_triangle(backend, use_graph):
    rng = np.random.default_rng(5)
    r = rng.standard_normal((8, 8))
    spd = r @ r.T + 8 * np.eye(8)
    a = spd.copy()
    a[np.triu_indices(8, 1)] = 99.0  # never read, never written
    info = np.full(1, -1, dtype=np.int32)
    _run(
        backend,
        use_graph,
        [a, info],
        lambda xp, a, info: linalg.potrf(a, info=info),
        "rw",
        "rw",
    )
    np.testing.assert_allclose(np.tril(a), np.linalg.cholesky(spd), rtol=1e-12)
    np.testing.assert_array_equal(a[np.triu_indices(8, 1)], 99.0)
    assert info[0] == 0


@MODES
def test_dot_into_a_one_element_array(backend, use_graph):
    x, y = np.arange(10.0), np.linspace(0, 1, 10)
    out = np.zeros(1)
    _run(
        backend,
        use_graph,
        [x, y, out],
        lambda xp, x, y, out: linalg.dot(x, y, out),
        "read",
        "read",
        "write",
    )
    assert out[0] == pytest.approx(float(x @ y))


@MODES
def test_tiles_of_a_bigger_matrix(backend, use_graph):
    """A row pitch larger than the row: the tile views of a matrix in one body."""
    rng = np.random.default_rng(6)
    m = rng.standard_normal((8, 8))
    expected = m.copy()
    expected[4:, 4:] -= m[4:, :4] @ m[:4, 4:]

    def body(xp, whole):
        linalg.gemm(whole[4:, :4], whole[:4, 4:], whole[4:, 4:], alpha=-1.0, beta=1.0)

    _run(backend, use_graph, [m], body, "rw")
    np.testing.assert_allclose(m, expected, rtol=1e-12)


@MODES
def test_a_tiled_cholesky_in_a_loop_scope(backend, use_graph):
    """The four kernels of a 2×2-tile factorisation, repeated in a recorded loop (each
    iteration refactors a fresh copy)."""
    rng = np.random.default_rng(7)
    r = rng.standard_normal((8, 8))
    spd = r @ r.T + 8 * np.eye(8)
    out = np.zeros_like(spd)
    with stf.stackable_context(backend=backend) as sctx:
        src, a = sctx.logical_data(spd), sctx.logical_data(out)
        with sctx.repeat(2):
            with sctx.task(src.read(), a.write()) as t:
                t.run(lambda xp, s, a: a.__setitem__(Ellipsis, s))
            with sctx.task(a.rw()) as t:

                def factor(xp, a):
                    linalg.potrf(a[:4, :4])
                    linalg.trsm(a[:4, :4], a[4:, :4], side="right", trans=True)
                    linalg.syrk(a[4:, :4], a[4:, 4:], alpha=-1.0, beta=1.0)
                    linalg.potrf(a[4:, 4:])

                t.run(factor)
    np.testing.assert_allclose(np.tril(out), np.linalg.cholesky(spd), rtol=1e-10)


@MODES
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("lower,trans", [(True, False), (True, True), (False, True)])
def test_trmm(backend, use_graph, side, lower, trans):
    rng = np.random.default_rng(8)
    a = rng.standard_normal((4, 4))
    b = rng.standard_normal((4, 3) if side == "left" else (3, 4))
    tri = np.tril(a) if lower else np.triu(a)
    op = tri.T if trans else tri
    expected = -(op @ b if side == "left" else b @ op)
    _run(
        backend,
        use_graph,
        [a, b],
        lambda xp, a, b: linalg.trmm(
            a, b, side=side, lower=lower, trans=trans, alpha=-1.0
        ),
        "read",
        "rw",
    )
    np.testing.assert_allclose(b, expected, rtol=1e-12)


@MODES
@DTYPES
@pytest.mark.parametrize("lower,unit", [(True, False), (False, False), (True, True)])
def test_trtri(backend, use_graph, dtype, lower, unit):
    rng = np.random.default_rng(9)
    n = 6
    a = (rng.standard_normal((n, n)) + 4 * np.eye(n)).astype(dtype)
    before = a.copy()
    triangle = np.tril(a) if lower else np.triu(a)
    if unit:
        np.fill_diagonal(triangle, 1.0)
    expected = np.linalg.inv(triangle.astype(np.float64))
    info = np.full(1, -1, dtype=np.int32)
    _run(
        backend,
        use_graph,
        [a, info],
        lambda xp, a, info: linalg.trtri(a, lower=lower, unit_diagonal=unit, info=info),
        "rw",
        "rw",
    )
    mine = np.tril(a, -1 if unit else 0) if lower else np.triu(a, 1 if unit else 0)
    want = (
        np.tril(expected, -1 if unit else 0)
        if lower
        else np.triu(expected, 1 if unit else 0)
    )
    np.testing.assert_allclose(mine, want, **_tol(dtype))
    kept = (
        np.triu_indices(n, 0 if unit else 1)
        if lower
        else np.tril_indices(n, 0 if unit else -1)
    )
    np.testing.assert_array_equal(a[kept], before[kept])
    assert info[0] == 0


@MODES
@DTYPES
@pytest.mark.parametrize("lower", [True, False])
def test_lauum(backend, use_graph, dtype, lower):
    rng = np.random.default_rng(10)
    n = 7
    a = rng.standard_normal((n, n)).astype(dtype)
    before = a.copy()
    triangle = np.tril(a) if lower else np.triu(a)
    product = triangle.T @ triangle if lower else triangle @ triangle.T
    _run(backend, use_graph, [a], lambda xp, a: linalg.lauum(a, lower=lower), "rw")
    where = np.tril_indices(n) if lower else np.triu_indices(n)
    other = np.triu_indices(n, 1) if lower else np.tril_indices(n, -1)
    np.testing.assert_allclose(a[where], product[where], **_tol(dtype))
    np.testing.assert_array_equal(a[other], before[other])


@MODES
@DTYPES
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (True, True)])
def test_gemm_batched(backend, use_graph, dtype, trans_a, trans_b):
    rng = np.random.default_rng(11)
    count, m, n, k = 6, 4, 3, 5
    a = rng.standard_normal((count, k, m) if trans_a else (count, m, k)).astype(dtype)
    b = rng.standard_normal((count, n, k) if trans_b else (count, k, n)).astype(dtype)
    c = rng.standard_normal((count, m, n)).astype(dtype)
    op_a = np.swapaxes(a, 1, 2) if trans_a else a
    op_b = np.swapaxes(b, 1, 2) if trans_b else b
    expected = 2.0 * (op_a @ op_b) + 0.5 * c
    _run(
        backend,
        use_graph,
        [a, b, c],
        lambda xp, a, b, c: linalg.gemm_batched(
            a, b, c, alpha=2.0, beta=0.5, trans_a=trans_a, trans_b=trans_b
        ),
        "read",
        "read",
        "rw",
    )
    np.testing.assert_allclose(c, expected, **_tol(dtype))


@MODES
def test_gemm_batched_on_views_with_a_shared_matrix(backend, use_graph):
    """Batches cut from bigger arrays (a batch stride and a row pitch of their own)
    and one matrix for every product."""
    rng = np.random.default_rng(12)
    whole = rng.standard_normal((5, 6, 7))
    shared = rng.standard_normal((3, 3))
    expected = whole.copy()
    expected[:, :3, 3:6] = shared @ whole[:, 3:6, :3] - whole[:, :3, 3:6]

    def body(xp, whole, shared):  # the two views do not overlap
        linalg.gemm_batched(shared, whole[:, 3:6, :3], whole[:, :3, 3:6], beta=-1.0)

    _run(backend, use_graph, [whole, shared], body, "rw", "read")
    np.testing.assert_allclose(whole, expected, rtol=1e-12)


def test_potri_of_one_tile_in_a_loop_scope(backend):
    """potrf, trtri and lauum of one tile (LAPACK's potri), repeated in a recorded
    loop: each needs a cuSOLVER workspace, none may allocate in the loop's graph."""
    rng = np.random.default_rng(13)
    r = rng.standard_normal((12, 12))
    spd = r @ r.T + 12 * np.eye(12)
    out = np.zeros_like(spd)
    with stf.stackable_context(backend=backend) as sctx:
        src, a = sctx.logical_data(spd), sctx.logical_data(out)
        with sctx.repeat(3):
            with sctx.task(src.read(), a.write()) as t:
                t.run(lambda xp, s, a: a.__setitem__(Ellipsis, s))
            with sctx.task(a.rw()) as t:

                def potri(xp, a):
                    linalg.potrf(a)
                    linalg.trtri(a)
                    linalg.lauum(a)

                t.run(potri)
    lower = np.tril(out)
    np.testing.assert_allclose(
        lower + np.tril(lower, -1).T, np.linalg.inv(spd), rtol=1e-10, atol=1e-12
    )
