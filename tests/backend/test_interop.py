"""stflow.interop: PyTorch, Numba, CuPy and Warp adapters on every backend.

Frameworks that are not installed make their tests skip (``pytest.importorskip``);
the "missing framework" behaviour is tested by hiding the module.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import stflow as stf
from stflow.errors import BackendUnavailableError
from stflow.interop import _common
from stflow.interop.cupy import cupy_arg, cupy_arguments, cupy_task
from stflow.interop.numba import (
    get_arg_numba,
    jit,
    numba_task,
    stf_kernel_decorator,
)
from stflow.interop.pytorch import pytorch_task, tensor_arg, tensor_arguments


def _torch(backend):
    torch = pytest.importorskip("torch")
    if backend == "cuda" and not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    return torch


def _run(code: str, **env: str) -> str:
    environment = {**os.environ, "STFLOW_BACKEND": "emulated", **env}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


# -- the package ---------------------------------------------------------------------
def test_importing_the_adapters_imports_no_framework():
    out = _run("""
        import sys
        import stflow.interop
        from stflow.interop import cupy, numba, pytorch, warp
        assert stflow.interop.pytorch is pytorch
        loaded = sorted(m for m in sys.modules
                        if m.split('.')[0] in ('numba', 'torch', 'cupy', 'warp', 'cuda'))
        print(loaded)
    """)
    assert out.strip() == "[]"


def test_public_names():
    import stflow.interop.numba as numba_adapter
    import stflow.interop.pytorch as pytorch_adapter

    assert numba_adapter.__all__ == [
        "get_arg_numba",
        "jit",
        "numba_arguments",
        "numba_task",
        "stf_kernel_decorator",
    ]
    assert pytorch_adapter.__all__ == ["pytorch_task", "tensor_arg", "tensor_arguments"]
    import stflow.interop

    assert set(stflow.interop.__all__) == {"cupy", "numba", "pytorch", "warp"}
    with pytest.raises(AttributeError):
        stflow.interop.tensorflow  # noqa: B018


@pytest.mark.parametrize(
    "module, extra, call",
    [
        ("torch", "torch", lambda ctx, ld: pytorch_task(ctx, ld.rw())),
        ("numba", "numba", lambda ctx, ld: numba_task(ctx, ld.rw()).__enter__()),
        (
            "warp",
            "warp",
            lambda ctx, ld: __import__(
                "stflow.interop.warp", fromlist=["warp_task"]
            ).warp_task(ctx, ld.rw()),
        ),
    ],
)
def test_missing_framework_names_the_extra(monkeypatch, module, extra, call):
    for name in [m for m in sys.modules if m.startswith(module + ".")] + [module]:
        monkeypatch.setitem(sys.modules, name, None)
    with stf.context(backend="emulated") as ctx:
        ld = ctx.logical_data(np.zeros(4))
        with pytest.raises(BackendUnavailableError, match=rf"stflow\[{extra}\]"):
            call(ctx, ld)
        np.testing.assert_array_equal(ctx.wait(ld), np.zeros(4))  # nothing pending


# -- PyTorch -------------------------------------------------------------------------
def test_pytorch_task_tensors_share_the_data(backend):
    torch = _torch(backend)
    x = np.arange(8.0)
    y = np.ones(8)
    with stf.context(backend=backend) as ctx:
        lx, ly, order = ctx.logical_data(x), ctx.logical_data(y), ctx.token()
        scope = pytorch_task(ctx, lx.read(), order.rw(), ly.rw(), symbol="axpy")
        with scope as tensors:
            assert isinstance(tensors, tuple) and len(tensors) == 2
            tx, ty = tensors
            assert tx.data_ptr() == scope.task.get_arg(0)
            assert ty.data_ptr() == scope.task.get_arg(2)
            if backend == "cuda":
                assert tx.device.type == ty.device.type == "cuda"
                current = torch.cuda.current_stream().cuda_stream
                assert current == int(scope.task.stream_ptr())
            else:
                assert tx.device.type == ty.device.type == "cpu"
            ty += 2 * tx
        if backend == "cuda":
            assert torch.cuda.current_stream().cuda_stream != int(scope.task.stream_ptr())
        with pytorch_task(ctx, ly.rw()) as (ty,):  # a tuple also for one
            ty *= 10
        with pytorch_task(ctx, order.read()) as nothing:
            assert nothing is None
    np.testing.assert_array_equal(y, 10 * (1 + 2 * np.arange(8.0)))


def test_tensor_arg_and_tensor_arguments(backend):
    _torch(backend)
    a, b = np.arange(4, dtype=np.int32), np.zeros(4, dtype=np.int32)
    with stf.context(backend=backend) as ctx:
        la, lb = ctx.logical_data(a), ctx.logical_data(b)
        with ctx.task(la.read(), lb.write()) as t:
            ta, tb = tensor_arguments(t)
            assert tensor_arg(t, 0).data_ptr() == ta.data_ptr() == t.get_arg(0)
            tb.copy_(ta * 3)
        with ctx.task(lb.rw()) as t:
            single = tensor_arguments(t)
            assert single.data_ptr() == t.get_arg(0)
            single += 1
        with ctx.task(ctx.token().read()) as t:
            assert tensor_arguments(t) is None
    np.testing.assert_array_equal(b, 3 * a + 1)


def test_pytorch_body_error_ends_the_task(backend):
    _torch(backend)
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(np.zeros(3))
        with pytest.raises(KeyError, match="body"):
            with pytorch_task(ctx, ld.rw()) as (tensor,):
                tensor += 1
                raise KeyError("body")
        with pytorch_task(ctx, ld.rw()) as (tensor,):  # the data is free again
            tensor += 1
        np.testing.assert_array_equal(ctx.wait(ld), np.full(3, 2.0))


def test_pytorch_entry_failure_ends_the_task(backend, monkeypatch):
    _torch(backend)
    import stflow.interop.pytorch as adapter

    def broken(torch, view):
        raise RuntimeError("conversion failed")

    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(np.zeros(3))
        monkeypatch.setattr(adapter, "_tensor", broken)
        with pytest.raises(RuntimeError, match="conversion failed"):
            with pytorch_task(ctx, ld.rw()):
                pytest.fail("the body must not run")
        monkeypatch.undo()
        with pytorch_task(ctx, ld.rw()) as (tensor,):
            tensor += 5
        np.testing.assert_array_equal(ctx.wait(ld), np.full(3, 5.0))


class _Ending:
    """A task whose end() fails after ending it (for the precedence tests)."""

    def __init__(self, task):
        self.inner = task

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def end(self):
        self.inner.end()
        raise LookupError("end")


class _FailingScope(_common.TaskScope):
    """A framework scope whose exit can fail, and an end() that can fail."""

    def __init__(self, ctx, *args, exit_fails=True, end_fails=False):
        super().__init__(ctx, args, None)
        self.exit_fails = exit_fails
        if end_fails:
            self.task = _Ending(self.task)

    def open_scope(self, scope):
        @contextlib.contextmanager
        def stream_scope():
            yield
            if self.exit_fails:
                raise OSError("stream exit")

        scope.enter_context(stream_scope())

    def result(self):
        return self.task


def _notes(error):
    return " ".join(getattr(error, "__notes__", []))


def test_task_scope_error_precedence():
    with stf.context(backend="emulated") as ctx:
        ld = ctx.logical_data(np.zeros(2))
        # the body's exception wins over the stream-exit and end() errors
        with pytest.raises(ValueError, match="body") as caught:
            with _FailingScope(ctx, ld.rw(), end_fails=True):
                raise ValueError("body")
        if sys.version_info >= (3, 11):
            assert "stream exit" in _notes(caught.value)
            assert "LookupError" in _notes(caught.value)
        # without a body error, the stream-exit error wins over the end() error
        with pytest.raises(OSError, match="stream exit") as caught:
            with _FailingScope(ctx, ld.rw(), end_fails=True):
                pass
        if sys.version_info >= (3, 11):
            assert "LookupError" in _notes(caught.value)
        with pytest.raises(LookupError, match="end"):
            with _FailingScope(ctx, ld.rw(), exit_fails=False, end_fails=True):
                pass
        # every task was ended: the data is free and the context finalizes cleanly
        with _FailingScope(ctx, ld.rw(), exit_fails=False) as task:
            assert task._phase == 1
        assert task._phase == 2
        np.testing.assert_array_equal(ctx.wait(ld), np.zeros(2))


# -- Numba ---------------------------------------------------------------------------
def test_kernel_configuration_errors():
    calls = []

    @jit
    def kernel(x):
        calls.append(x)

    assert isinstance(kernel, stf_kernel_decorator)
    with pytest.raises(TypeError, match="configured"):
        kernel[1]
    with pytest.raises(TypeError, match="configured"):
        kernel[1, 2, None, None, None]
    with pytest.raises(TypeError, match="exec_place"):
        kernel[1, 2, "device"]
    with pytest.raises(TypeError, match="context"):
        kernel[1, 2, None, "ctx"]
    with pytest.raises(RuntimeError, match="launch configuration"):
        kernel(1)
    launcher = kernel[1, 32]
    with pytest.raises(AttributeError, match="immutable"):
        launcher._grid = 2
    with pytest.raises(TypeError, match="dependency"):
        launcher(np.zeros(3))  # no dep, no context
    assert kernel._kernel is None and calls == []  # nothing compiled

    @jit(debug=False)
    def other(x):
        pass

    assert isinstance(other, stf_kernel_decorator)
    assert other._jit_kwargs == {"debug": False}


def _numba_real_mode():
    numba = pytest.importorskip("numba")
    from numba.core import config

    return numba, bool(config.ENABLE_CUDASIM)


def test_numba_without_simulator_on_the_emulated_backend():
    _, simulated = _numba_real_mode()
    if simulated:
        pytest.skip("this process runs Numba's simulator")
    with stf.context(backend="emulated") as ctx:
        ld = ctx.logical_data(np.zeros(4))
        with pytest.raises(BackendUnavailableError, match="NUMBA_ENABLE_CUDASIM"):
            with numba_task(ctx, ld.rw()):
                pytest.fail("the body must not run")
        with ctx.task(ld.rw()) as t:
            with pytest.raises(BackendUnavailableError):
                get_arg_numba(t, 0)
        np.testing.assert_array_equal(ctx.wait(ld), np.zeros(4))


def test_numba_adapter_under_the_simulator():
    pytest.importorskip("numba")
    out = _run(
        """
        import numpy as np
        import stflow as stf
        from numba import cuda
        from stflow.interop.numba import (get_arg_numba, jit, numba_arguments,
                                          numba_task)

        @cuda.jit
        def add(x, y):
            i = cuda.grid(1)
            if i < x.size:
                y[i] += x[i]

        @jit()
        def scale(x, factor):
            i = cuda.grid(1)
            if i < x.size:
                x[i] *= factor

        x, y = np.arange(16.0), np.ones(16)
        with stf.context(backend="emulated") as ctx:
            lx, ly, order = ctx.logical_data(x), ctx.logical_data(y), ctx.token()
            with numba_task(ctx, lx.read(), order.read(), ly.rw()) as (arrays, stream):
                assert isinstance(stream, stf.CudaStream) and len(arrays) == 2
                add[1, 16, stream](*arrays)
            scale[2, 8](ly.rw(), 2.0)                     # context of the dependency
            scale[1, 16, stf.exec_place.device(1), ctx](lx.rw(), -1.0)
            with ctx.task(lx.read(), ly.read()) as t:
                first = get_arg_numba(t, 0)
                assert first._ary.ctypes.data == t.get_arg(0)   # zero-copy
                both = numba_arguments(t)
                assert len(both) == 2
                assert both[1]._ary.ctypes.data == t.get_arg(1)
            with numba_task(ctx, order.rw()) as (arrays, stream):
                assert arrays == ()
        assert y.tolist() == (2 * (1 + np.arange(16.0))).tolist(), y
        assert x.tolist() == (-np.arange(16.0)).tolist(), x
        print("ok")
    """,
        NUMBA_ENABLE_CUDASIM="1",
    )
    assert out.strip().endswith("ok")


def test_numba_on_the_cuda_backend(backend):
    if backend != "cuda":
        pytest.skip("GPU memory")
    numba, simulated = _numba_real_mode()
    if simulated:
        pytest.skip("this process runs Numba's simulator")
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack  # test-only shim: numba-cuda 0.30 on NumPy >= 2.5
    cuda = pytest.importorskip("numba.cuda")
    if not cuda.is_available():
        pytest.skip("Numba sees no CUDA device")
    for config in (getattr(numba, "config", None), getattr(cuda, "config", None)):
        if config is not None and hasattr(config, "CUDA_LOW_OCCUPANCY_WARNINGS"):
            config.CUDA_LOW_OCCUPANCY_WARNINGS = 0  # a tiny grid, on purpose
    warnings.filterwarnings("ignore", message=".*Grid size")  # after an escape

    @cuda.jit
    def raw_add(x, y):
        i = cuda.grid(1)
        if i < x.size:
            y[i] += x[i]

    add = jit(raw_add.py_func)
    x, y = np.arange(256.0), np.ones(256)
    with stf.context(backend="cuda") as ctx:
        lx, ly = ctx.logical_data(x), ctx.logical_data(y)
        with numba_task(ctx, lx.read(), ly.rw()) as (arrays, stream):
            assert (
                arrays[0].__cuda_array_interface__["data"][0]
                == arrays[0].device_ctypes_pointer.value
            )
            raw_add[2, 128, cuda.external_stream(int(stream))](*arrays)
        add[2, 128](lx.read(), ly.rw())
    np.testing.assert_array_equal(y, 1 + 2 * np.arange(256.0))


# -- CuPy ----------------------------------------------------------------------------
def test_cupy_adapter_needs_the_cuda_backend():
    with stf.context(backend="emulated") as ctx:
        ld = ctx.logical_data(np.zeros(4))
        with pytest.raises(BackendUnavailableError, match="CUDA backend"):
            cupy_task(ctx, ld.rw())
        with ctx.task(ld.rw()) as t:
            with pytest.raises(BackendUnavailableError, match="CUDA backend"):
                cupy_arg(t, 0)
            with pytest.raises(BackendUnavailableError, match="CUDA backend"):
                cupy_arguments(t)


def test_cupy_task_on_the_cuda_backend(backend):
    if backend != "cuda":
        pytest.skip("GPU memory")
    cupy = pytest.importorskip("cupy")
    x, y = np.arange(1000.0), np.ones(1000)
    with stf.context(backend="cuda") as ctx:
        lx, ly = ctx.logical_data(x), ctx.logical_data(y)
        scope = cupy_task(ctx, lx.read(), ly.rw())
        with scope as (cx, cy):
            assert cx.data.ptr == scope.task.get_arg(0)
            assert cupy.cuda.get_current_stream().ptr == int(scope.task.stream_ptr())
            cy += 2 * cx
        with ctx.task(ly.rw()) as t:
            assert cupy_arg(t, 0).data.ptr == t.get_arg(0)
    np.testing.assert_array_equal(y, 1 + 2 * np.arange(1000.0))


# -- Warp ----------------------------------------------------------------------------
def test_warp_task_arrays(backend):
    wp = pytest.importorskip("warp")
    wp.config.quiet = True
    from stflow.interop.warp import warp_arg, warp_arguments, warp_task

    if backend == "cuda" and not wp.is_cuda_available():
        pytest.skip("Warp sees no CUDA device")
    x = np.arange(8, dtype=np.float32)
    y = np.ones(8, dtype=np.float32)
    with stf.context(backend=backend) as ctx:
        lx, ly = ctx.logical_data(x), ctx.logical_data(y)
        scope = warp_task(ctx, lx.read(), ly.rw())
        with scope as (wx, wy):
            assert wx.ptr == scope.task.get_arg(0) and wy.ptr == scope.task.get_arg(1)
            assert wx.shape == (8,) and wx.dtype == wp.float32
            if backend == "emulated":
                assert str(wy.device) == "cpu"
                wy.numpy()[:] += 2 * wx.numpy()  # zero-copy on the CPU
            else:
                assert wp.get_stream(wy.device).cuda_stream == int(
                    scope.task.stream_ptr()
                )
                wp.copy(wy, wx)
        with ctx.task(ly.rw()) as t:
            assert warp_arg(t, 0).ptr == t.get_arg(0)
            assert warp_arguments(t).ptr == t.get_arg(0)
    expected = 1 + 2 * x if backend == "emulated" else x
    np.testing.assert_array_equal(y, expected)
