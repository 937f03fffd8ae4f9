"""The framework forms of a task on a distributed context: ``cuda_kernel`` launches,
``@stflow.interop.numba.jit`` kernels, and the ``pytorch_task`` / ``numba_task`` /
``warp_task`` scopes run on the executing rank only; the code describing them is the
same on every rank (emulated backend: Python kernels, PyTorch CPU tensors, Numba's
CUDA simulator, Warp on the CPU; the PyTorch tests also on CUDA, with the backend
STFLOW_DISTRIBUTED_BACKEND names)."""

from __future__ import annotations

import ctypes
import os
import sys

import numpy as np
import pytest

import stflow as stf
from stflow.errors import RemoteTaskError


def _axpy(a, x, y, n):  # an emulated "kernel": a Python callable
    y[:n] += a * x[:n]


def _expected(size):
    return [np.full(4, 1.0 + 2.0 * r) for r in range(size)]


def test_cuda_kernel_launches_on_the_executing_rank_only(comm):
    size, rank = comm.Get_size(), comm.Get_rank()
    ys = [np.ones(4) for _ in range(size)]
    with stf.distributed_context(comm, backend="emulated") as ctx:
        x = ctx.logical_data(np.full(4, 2.0), owner=0, name="x")
        y = [ctx.logical_data(ys[r], owner=r, name=f"y{r}") for r in range(size)]
        for r in range(size):
            # the same code on every rank; only rank r launches
            with ctx.cuda_kernel(x.read(), y[r].rw()) as k:
                assert k.rank == r and k.runs_here == (r == rank)
                k.launch(
                    _axpy, 1, 1, (float(r), k.get_arg(0), k.get_arg(1), ctypes.c_int(4))
                )
        seen = [ctx.wait(y[r]) for r in range(size)]
    for r in range(size):
        np.testing.assert_array_equal(seen[r], _expected(size)[r])
    np.testing.assert_array_equal(ys[rank], _expected(size)[rank])


def test_a_kernel_argument_elsewhere_is_only_a_placeholder(comm):
    with stf.distributed_context(comm, backend="emulated") as ctx:
        x = ctx.logical_data(np.zeros(4), owner=comm.Get_size() - 1)
        with ctx.cuda_kernel(x.rw()) as k:
            arg = k.get_arg(0)
            if not k.runs_here:
                assert "nothing on this rank" in repr(arg)
                with pytest.raises(TypeError):
                    ctypes.c_void_p(arg)  # not an address
            k.launch(lambda a: a.__iadd__(1), 1, 1, (arg,))
        np.testing.assert_array_equal(ctx.wait(x), np.ones(4))


def test_a_cuda_kernel_takes_its_place_first_or_by_keyword(comm):
    with stf.distributed_context(comm, backend="emulated") as ctx:
        x = ctx.logical_data(np.zeros(2), owner=0)
        with ctx.cuda_kernel(stf.exec_place.device(0), x.rw()) as k:
            k.launch(lambda a: a.__iadd__(3), 1, 1, (k.get_arg(0),))
        with ctx.task(stf.exec_place.device(0), x.rw()) as t:
            t.run(lambda xp, a: a.__iadd__(1))
        with pytest.raises(TypeError, match="both as the first argument and as place="):
            ctx.task(stf.exec_place.device(0), x.rw(), place=stf.exec_place.device(0))
        np.testing.assert_array_equal(ctx.wait(x), np.full(2, 4.0))


def test_pytorch_task_yields_tensors_where_the_task_executes(comm, backend):
    torch = pytest.importorskip("torch")
    from stflow.interop.pytorch import pytorch_task, tensor_arguments

    size, rank = comm.Get_size(), comm.Get_rank()
    with stf.distributed_context(comm, backend=backend) as ctx:
        x = ctx.logical_data(np.full(4, 2.0), owner=0)
        y = [ctx.logical_data(np.ones(4), owner=r) for r in range(size)]
        for r in range(size):
            with pytorch_task(ctx, y[r].rw(), x.read()) as tensors:
                if tensors:  # false where it does not run
                    ty, tx = tensors
                    assert isinstance(ty, torch.Tensor)
                    ty.add_(float(r) * tx)
                else:
                    assert r != rank
            with ctx.task(y[r].rw()) as t:  # the adapter's functions
                if t.runs_here:
                    tensor_arguments(t).mul_(1)
        seen = [ctx.wait(y[r]) for r in range(size)]
    for r in range(size):
        np.testing.assert_array_equal(seen[r], _expected(size)[r])


def test_unpacking_tensors_on_another_rank_names_the_guard(comm, backend):
    pytest.importorskip("torch")
    from stflow.interop.pytorch import pytorch_task

    size, rank = comm.Get_size(), comm.Get_rank()
    with stf.distributed_context(comm, backend=backend) as ctx:
        y = ctx.logical_data(np.ones(4), owner=size - 1)
        if rank != size - 1:
            with pytest.raises(RemoteTaskError, match=r"'if arrays:'"):
                with pytorch_task(ctx, y.rw()) as (ty,):
                    ty.add_(1)
        else:
            with pytorch_task(ctx, y.rw()) as (ty,):
                ty.add_(1)
        np.testing.assert_array_equal(ctx.wait(y), np.full(4, 2.0))


def test_numba_jit_kernels_launch_on_the_executing_rank(comm, backend):
    if backend != "emulated":
        pytest.skip("Numba's CUDA simulator")
    if "numba" not in sys.modules:  # the simulator is chosen at Numba's import
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    try:
        from helpers.numba_kernels import scale_add
    except Exception as exc:  # noqa: BLE001 - absent, or broken (numba-cuda
        pytest.skip(f"numba.cuda does not import here: {exc}")  # 0.30.4, NumPy 2.5)
    from numba import config

    if not config.ENABLE_CUDASIM:
        pytest.skip("Numba was imported without its CUDA simulator")
    from stflow.interop.numba import jit, numba_task

    kernel = jit(scale_add)
    size = comm.Get_size()
    with stf.distributed_context(comm, backend="emulated") as ctx:
        x = ctx.logical_data(np.full(4, 2.0), owner=0)
        y = [ctx.logical_data(np.ones(4), owner=r) for r in range(size)]
        for r in range(size):
            kernel[1, 4](y[r].rw(), x.read(), float(r))
        z = ctx.logical_data(np.zeros(4), owner=size - 1)
        with numba_task(ctx, z.write(), y[0].read()) as arrays:
            if arrays:
                (tz, ty), _stream = arrays
                tz[:] = ty[:]
        kernel[1, 4, None, ctx](z.rw(), x.read(), 1.0)
        seen = [ctx.wait(y[r]) for r in range(size)]
        seen_z = ctx.wait(z)
    for r in range(size):
        np.testing.assert_array_equal(seen[r], _expected(size)[r])
    np.testing.assert_array_equal(seen_z, np.full(4, 3.0))


def test_warp_task_on_a_distributed_context(comm):
    pytest.importorskip("warp")
    from stflow.interop.warp import warp_task

    size, rank = comm.Get_size(), comm.Get_rank()
    with stf.distributed_context(comm, backend="emulated") as ctx:
        y = ctx.logical_data(np.ones(4), owner=size - 1)
        with warp_task(ctx, y.rw()) as arrays:
            if arrays:
                (wy,) = arrays
                wy.numpy()[:] += 1
            else:
                assert rank != size - 1
        np.testing.assert_array_equal(ctx.wait(y), np.full(4, 2.0))
