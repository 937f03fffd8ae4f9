"""stflow.linalg on CuPy arrays, called directly (no task): every routine against
NumPy, its handles per stream, cuSOLVER's ``info``, and a capture into a CUDA graph on
a stream it has never used (handles and workspaces made during the capture) that
records no memory node and replays with new inputs."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.gpu import cupy_stream, sync

from stflow import _linalg_cuda, linalg

DTYPES = pytest.mark.parametrize("dtype", [np.float64, np.float32])


def _tol(dtype):
    return (
        dict(rtol=1e-10, atol=1e-10)
        if dtype == np.float64
        else dict(rtol=2e-4, atol=2e-4)
    )


def _spd(n, seed, dtype=np.float64):
    r = np.random.default_rng(seed).standard_normal((n, n))
    return (r @ r.T + n * np.eye(n)).astype(dtype)


@DTYPES
def test_every_routine_matches_numpy(cupy, dtype):
    rng = np.random.default_rng(1)
    host = {
        name: rng.standard_normal(shape).astype(dtype)
        for name, shape in (
            ("a", (6, 4)),
            ("b", (6, 5)),
            ("c", (4, 5)),
            ("x", (6,)),
            ("y", (4,)),
            ("batch_a", (3, 4, 6)),
            ("batch_c", (3, 4, 5)),
        )
    }
    d = {name: cupy.asarray(value) for name, value in host.items()}
    out = cupy.zeros(1, dtype)
    linalg.gemm(d["a"], d["b"], d["c"], alpha=2.0, beta=-1.0, trans_a=True)
    linalg.gemv(d["a"], d["x"], d["y"], alpha=0.5, beta=1.0, trans=True)
    linalg.gemm_batched(d["batch_a"], d["b"], d["batch_c"], beta=1.0)
    linalg.dot(d["x"], d["x"], out)
    tol = _tol(dtype)
    np.testing.assert_allclose(
        d["c"].get(), 2.0 * host["a"].T @ host["b"] - host["c"], **tol
    )
    np.testing.assert_allclose(
        d["y"].get(), 0.5 * host["a"].T @ host["x"] + host["y"], **tol
    )
    np.testing.assert_allclose(
        d["batch_c"].get(), host["batch_a"] @ host["b"] + host["batch_c"], **tol
    )
    np.testing.assert_allclose(out.get()[0], host["x"] @ host["x"], **tol)

    spd = _spd(6, 2, dtype)
    a = cupy.asarray(spd)
    linalg.potrf(a)
    factor = np.tril(a.get())
    np.testing.assert_allclose(factor, np.linalg.cholesky(spd.astype(np.float64)), **tol)
    rhs = cupy.asarray(host["b"])
    linalg.trsm(a, rhs, side="left")
    np.testing.assert_allclose(factor @ rhs.get(), host["b"], **tol)
    linalg.trmm(a, rhs, side="left")
    np.testing.assert_allclose(rhs.get(), host["b"], **tol)
    low = cupy.asarray(host["batch_c"][0][:4, :4] + 0)  # 4 × 4, not symmetric
    linalg.syrk(d["a"], low, alpha=-1.0, beta=1.0, trans=True)
    want = -host["a"].T @ host["a"] + host["batch_c"][0][:4, :4]
    np.testing.assert_allclose(np.tril(low.get()), np.tril(want), **tol)
    linalg.trtri(a)
    linalg.lauum(a)
    lower = np.tril(a.get()).astype(np.float64)
    np.testing.assert_allclose(
        lower + np.tril(lower, -1).T,
        np.linalg.inv(spd.astype(np.float64)),
        rtol=1e-8 if dtype == np.float64 else 2e-3,
        atol=1e-10 if dtype == np.float64 else 1e-4,
    )


def test_info_reports_what_cusolver_found(cupy):
    info = cupy.full(1, -1, np.int32)
    not_spd = cupy.asarray(-np.eye(4))
    linalg.potrf(not_spd, info=info)
    assert int(info.get()[0]) == 1  # the first minor fails
    singular = cupy.asarray(np.tril(np.ones((4, 4))))
    singular[2, 2] = 0.0
    linalg.trtri(singular, info=info)
    assert int(info.get()[0]) == 3  # a[2, 2], counted from 1
    linalg.trtri(cupy.asarray(np.eye(3) * 2), info=info)
    assert int(info.get()[0]) == 0


def test_one_pair_of_handles_per_stream(cupy):
    copies = [cupy.asarray(_spd(8, 3)) for _ in range(8)]
    cupy.cuda.Device().synchronize()
    first, second = cupy.cuda.Stream(), cupy.cuda.Stream()
    linalg.potrf(copies[0], stream=first.ptr)
    count = len(_linalg_cuda._HANDLES)
    for i in range(3):
        linalg.potrf(copies[1 + i], stream=first.ptr)
        with first:
            linalg.trtri(copies[4 + i])  # CuPy's current stream: first
    assert len(_linalg_cuda._HANDLES) == count
    linalg.potrf(copies[7], stream=second)  # a CuPy stream object
    assert len(_linalg_cuda._HANDLES) == count + 1
    first.synchronize()
    second.synchronize()


def _node_kinds(driver, graph):
    """The kinds of every node of ``graph``, those inside its child graphs included
    (cuBLAS and cuSOLVER under capture add child graph nodes of their own)."""

    def checked(result):
        err, *values = result
        assert int(err) == 0, err
        return values

    kinds = set()
    pending = [graph]
    while pending:
        current = pending.pop()
        count = int(checked(driver.cuGraphGetNodes(current, 0))[-1])
        nodes = list(checked(driver.cuGraphGetNodes(current, count))[0])[:count]
        for node in nodes:
            kind = checked(driver.cuGraphNodeGetType(node))[0]
            kinds.add(kind)
            if kind == driver.CUgraphNodeType.CU_GRAPH_NODE_TYPE_GRAPH:
                pending.append(checked(driver.cuGraphChildGraphNodeGetGraph(node))[0])
    return kinds


def test_a_capture_on_a_new_stream_records_no_allocation(cupy, cuda, stream):
    """The first calls on ``stream`` happen inside the capture: the handles, their
    workspaces and cuSOLVER's buffers are made then, and none of it becomes a node."""
    from cuda.bindings import driver

    n = 16
    spd = _spd(n, 4)
    source = cupy.asarray(spd)
    a = cupy.empty_like(source)
    b = cupy.asarray(np.random.default_rng(5).standard_normal((4, n, n)))
    c = cupy.zeros((4, n, n))
    cupy.cuda.Device().synchronize()
    graphs = cuda.graphs
    graph = graphs.create_graph()
    handle = int(stream.handle)
    graphs.begin_capture(stream, graph, [])
    try:
        with cupy_stream(handle):
            a[...] = source  # a copy kernel on the stream
            linalg.potrf(a)  # on CuPy's current stream
            linalg.trtri(a, stream=handle)
            linalg.lauum(a, stream=handle)
            linalg.gemm_batched(a, b, c, stream=handle)
    finally:
        graphs.end_capture(stream)
    kinds = _node_kinds(driver, graph)
    T = driver.CUgraphNodeType
    assert T.CU_GRAPH_NODE_TYPE_KERNEL in kinds  # the libraries' kernels
    assert T.CU_GRAPH_NODE_TYPE_MEM_ALLOC not in kinds
    assert T.CU_GRAPH_NODE_TYPE_MEM_FREE not in kinds
    executable = graphs.instantiate(graph)
    try:
        for scale in (1.0, 2.0):  # replays read the new input
            source[...] = cupy.asarray(spd * scale)
            cupy.cuda.Device().synchronize()
            graphs.launch(executable, stream)
            sync(cuda, stream)
            inverse = np.linalg.inv(spd * scale)
            lower = np.tril(a.get())
            np.testing.assert_allclose(
                lower + np.tril(lower, -1).T, inverse, rtol=1e-9, atol=1e-12
            )
            np.testing.assert_allclose(c.get(), a.get() @ b.get(), rtol=1e-10, atol=1e-12)
    finally:
        graphs.destroy_exec(executable)
        graphs.destroy_graph(graph)
