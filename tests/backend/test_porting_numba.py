"""The usage patterns of the reference's Numba tests (CCCL
``python/cuda_cccl/tests/stf/interop/test_numba.py``) under Numba's CUDA simulator on
the emulated backend, ported by the import line alone: kernels launched on
``numba.cuda.external_stream(t.stream_ptr())``, in stream mode, graph mode and graph
scopes (``stflow.interop._numba_simulator``). Each test runs in a subprocess, since the
simulator must be chosen before Numba is imported."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("numba")


def _run(code: str) -> str:
    environment = {
        **os.environ,
        "STFLOW_BACKEND": "emulated",
        "NUMBA_ENABLE_CUDASIM": "1",
    }
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


_KERNELS = """
    import numpy as np
    from numba import cuda
    import stflow as stf
    from stflow.interop.numba import get_arg_numba, jit, numba_arguments

    @cuda.jit
    def axpy(a, x, y):
        i = cuda.grid(1)
        if i < x.size:
            y[i] = a * x[i] + y[i]

    @cuda.jit
    def scale(a, x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] = a * x[i]

    @cuda.jit
    def copy(src, dst):
        i = cuda.grid(1)
        if i < src.size:
            dst[i] = src[i]
"""


def test_the_reference_numba_patterns_run_under_the_simulator():
    out = _run(
        _KERNELS
        + """
    # stream mode: the axpy chain
    X, Y, Z = (np.ones(16, dtype=np.float32) for _ in range(3))
    ctx = stf.context()
    lX, lY, lZ = ctx.logical_data(X), ctx.logical_data(Y), ctx.logical_data(Z)
    with ctx.task(lX.rw()) as t:
        scale[1, 16, cuda.external_stream(t.stream_ptr())](2.0, numba_arguments(t))
    with ctx.task(lX.read(), lY.rw()) as t:
        nb_stream = cuda.external_stream(t.stream_ptr())
        assert int(nb_stream) == int(t.stream_ptr())
        axpy[1, 16, nb_stream](2.0, get_arg_numba(t, 0), get_arg_numba(t, 1))
    with ctx.task(lX.read(), lZ.rw()) as t:
        dX, dZ = numba_arguments(t)
        axpy[1, 16, cuda.external_stream(t.stream_ptr())](2.0, dX, dZ)
    with ctx.task(lY.read(), lZ.rw()) as t:
        dY, dZ = numba_arguments(t)
        axpy[1, 16, cuda.external_stream(t.stream_ptr())](2.0, dY, dZ)
    ctx.finalize()
    assert (X.tolist(), Y.tolist(), Z.tolist()) == ([2.0] * 16, [5.0] * 16, [15.0] * 16)

    # graph mode: one kernel in a CUDA graph
    X = np.ones(32 * 8, dtype=np.float32)
    ctx = stf.context(use_graph=True)
    lX = ctx.logical_data(X)
    with ctx.task(lX.rw()) as t:
        dX = numba_arguments(t)
        assert dX.shape == (256,) and dX.size == 256
        scale[8, 32, cuda.external_stream(t.stream_ptr())](2.0, dX)
    ctx.finalize()
    assert X.tolist() == [2.0] * 256

    # a graph scope of a stackable context, initialised data on a device
    full, zeros = np.empty(64, dtype=np.float32), np.empty(64, dtype=np.float32)
    ctx = stf.stackable_context()
    lfull = ctx.logical_data_full((64,), 3.0, dtype=np.float32,
                                  exec_place=stf.exec_place.device(0))
    lzeros = ctx.logical_data_zeros((64,), dtype=np.float32,
                                    exec_place=stf.exec_place.device(0))
    lfo, lzo = ctx.logical_data(full), ctx.logical_data(zeros)
    with ctx.graph_scope():
        for source, target in ((lfull, lfo), (lzeros, lzo)):
            with ctx.task(source.read(), target.write()) as t:
                nb_stream = cuda.external_stream(t.stream_ptr())
                src, dst = numba_arguments(t)
                copy[2, 32, nb_stream](src, dst)
    ctx.finalize()
    assert full.tolist() == [3.0] * 64 and zeros.tolist() == [0.0] * 64

    # stflow's launcher in a repeat loop: the kernel runs once per iteration
    @jit
    def increment(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] += 1
    x = np.zeros(8)
    ctx = stf.stackable_context()
    lx = ctx.logical_data(x)
    with ctx.repeat(3):
        increment[1, 8](lx.rw())
    ctx.finalize()
    assert x.tolist() == [3.0] * 8
    print("ok")
    """
    )
    assert out.strip().endswith("ok")


def test_simulator_misuse_is_refused_clearly():
    out = _run(
        _KERNELS
        + """
    from stflow.errors import ScopeError
    try:
        cuda.external_stream(0x1234)                 # not a stream of stflow's
    except RuntimeError as error:
        assert "unsupported in the simulator" in str(error), error
    else:
        raise AssertionError("a foreign handle was accepted")
    ctx = stf.stackable_context()
    lx = ctx.logical_data(np.ones(4))
    try:
        with ctx.graph_scope():
            with ctx.task(lx.rw(), symbol="peek") as t:
                (dx,) = t.views() and numba_arguments(t),
                dx.copy_to_host()                    # its data exists only later
    except ScopeError as error:
        assert "task 'peek'" in str(error) and "recorded into a graph" in str(error)
    else:
        raise AssertionError("reading a recorded array on the host was accepted")
    ctx.finalize()

    # a recorded kernel that fails names its task when the error is raised
    @cuda.jit
    def bad(x):
        raise ValueError("kernel failed")
    ctx = stf.stackable_context()
    lx = ctx.logical_data(np.ones(4))
    with ctx.graph_scope():
        with ctx.task(lx.rw(), symbol="boom") as t:
            bad[1, 1, cuda.external_stream(t.stream_ptr())](numba_arguments(t))
    try:
        ctx.finalize()
    except ValueError as error:
        assert any("task 'boom'" in note for note in error.__notes__), error.__notes__
    else:
        raise AssertionError("the kernel's error was lost")
    print("ok")
    """
    )
    assert out.strip().endswith("ok")
