"""Primary contexts destroyed behind stflow's back (another framework resets the
device): the next context re-retains them (``CudaBackend.revalidate_contexts``).

Each scenario runs in a child process: a device reset destroys every CUDA object of
the process, which would break the other tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

_COMMON = """
import numpy as np
import stflow as stf
from stflow.backends import get_backend

def run_fill(value):
    # Only stflow's own work (fills, copies): no other library's cached state.
    with stf.stackable_context(backend="cuda") as sctx:
        with sctx.repeat(2):
            y = sctx.logical_data_full((8,), value, dtype=np.float32)
        got = sctx._ctx.wait(y)
    assert (got == value).all(), got
"""

_NUMBA = """
# Test-only shim, as in tests/conftest.py: numba-cuda 0.30 still calls
# numpy.row_stack, which NumPy 2.5 removed.
if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack
from numba import cuda

@cuda.jit
def add(x, value):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += value

def run_numba(value):
    X = np.zeros(16)
    with stf.stackable_context(backend="cuda") as sctx:
        x = sctx.logical_data(X)
        with sctx.repeat(3):
            with sctx.task(x.rw()) as t:
                add[1, 32, cuda.external_stream(t.stream_ptr())](
                    cuda.as_cuda_array(t.get_arg_cai(0)), value)
    assert (X == 3 * value).all(), X
"""


def _source(program: str, prelude: str = "") -> str:
    return _COMMON + prelude + textwrap.dedent(program)


def _run(program: str, prelude: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ, STFLOW_PURE_PYTHON="1")
    source = _source(program, prelude)
    return subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", source],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _check(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout, result.stdout + result.stderr


def test_stackable_repeat_after_a_numba_device_reset():
    """The reference's scenario (test_lifecycle.py): stackable repeat with a Numba
    body, Numba resets the device, a stackable repeat again. The second repeat has
    stflow-only work: numba-cuda 0.30 itself cannot launch after its own reset
    (``CUDA_ERROR_CONTEXT_IS_DESTROYED`` from Numba alone, checked on an H200)."""
    pytest.importorskip("numba.cuda")
    _check(
        _run(
            prelude=_NUMBA,
            program="""
        run_numba(1.0)
        cuda.get_current_device().reset()
        run_fill(2.0)
        run_fill(4.0)
        print("OK")
    """,
        )
    )


def test_context_after_a_driver_level_primary_context_reset():
    _check(
        _run("""
        from cuda.bindings import driver
        run_fill(1.0)
        backend = get_backend("cuda")
        old = backend._context_ids[0]
        err, dev = driver.cuDeviceGet(0)
        (err,) = driver.cuDevicePrimaryCtxReset(dev)
        assert err == driver.CUresult.CUDA_SUCCESS, err
        run_fill(2.0)                       # re-retained at context creation
        assert backend._context_ids[0] != old
        assert backend.revalidate_contexts() is False     # nothing stale any more
        with stf.context(backend="cuda", use_graph=True) as ctx:
            z = ctx.logical_data_full((4,), 5.0, dtype=np.float32)
            got = ctx.wait(z)
        assert (got == 5.0).all(), got
        print("OK")
    """)
    )


def test_revalidation_is_a_no_op_without_a_reset(cuda):
    ids = list(cuda._context_ids)
    assert cuda.revalidate_contexts() is False
    assert cuda._context_ids == ids
