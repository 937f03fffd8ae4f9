"""ctx.cuda_kernel / cuda_kernel: dependencies as for tasks, launches in call order,
argument marshalling and validation. The emulated backend launches Python callables;
the CUDA backend compiles a real kernel with cuda.core (NVRTC)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import stflow as stf
from stflow._handles.kernel import _pack
from stflow.backends._base import HOST
from stflow.errors import BackendUnavailableError, ContextFinalizedError, ScopeError

AXPY_SOURCE = r"""
extern "C" __global__ void axpy(double a, const double* x, double* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
"""


def _axpy_emulated(a, x, y, n):
    y[:n] += a * x[:n]


@pytest.fixture
def axpy(backend):
    """The axpy kernel of the backend: a Python callable, or a cuda.core Kernel."""
    if backend == "emulated":
        return _axpy_emulated
    core = pytest.importorskip("cuda.core")
    device = core.Device(0)
    device.set_current()
    try:
        program = core.Program(
            AXPY_SOURCE, "c++", core.ProgramOptions(arch=f"sm_{device.arch}")
        )
        return program.compile("cubin").get_kernel("axpy")
    except Exception as exc:  # noqa: BLE001 - e.g. NVRTC is not installed
        pytest.skip(f"cannot compile a kernel with cuda.core here: {exc}")


def test_axpy_with_every_argument_form(backend, axpy):
    n = 1000
    x, y = np.arange(n, dtype=np.float64), np.ones(n)
    with stf.context(backend=backend) as ctx:
        lx, ly = ctx.logical_data(x, name="x"), ctx.logical_data(y, name="y")
        with ctx.cuda_kernel(lx.read(), ly.rw(), symbol="axpy") as k:
            assert isinstance(k, stf.cuda_kernel)
            k.launch(
                axpy,
                (n + 127) // 128,
                128,
                (ctypes.c_double(2.0), k.get_arg(0), k.get_arg(1), ctypes.c_int(n)),
            )
            k.launch(
                axpy,
                [(n + 255) // 256],
                (256, 1, 1),
                (np.float64(1.0), k.get_arg(0), k.get_arg(1), np.int32(n)),
            )
        with ctx.cuda_kernel(lx.read(), ly.rw()) as k:
            k.launch(
                axpy,
                (n + 127) // 128,
                128,
                (-0.5, k.get_arg(0), k.get_arg(1), ctypes.c_int32(n)),
                shmem=0,
            )
    np.testing.assert_array_equal(y, 1 + 2.5 * np.arange(n))


def test_launches_run_in_call_order(backend):
    if backend != "emulated":
        pytest.skip("Python callables run on the emulated backend")
    order = []
    data = np.zeros(4)
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(data)
        with ctx.cuda_kernel(ld.rw()) as k:
            for step in range(5):
                k.launch(
                    lambda array, step: (
                        order.append(step),
                        array.__setitem__(slice(None), step),
                    ),
                    1,
                    1,
                    (k.get_arg(0), step),
                )
        with ctx.cuda_kernel(ld.rw()) as k:
            k.launch(lambda array: array.__iadd__(10), 1, 1, (k.get_arg(0),))
    assert order == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(data, np.full(4, 14.0))


def test_emulated_kernel_arguments(backend):
    if backend != "emulated":
        pytest.skip("Python callables run on the emulated backend")
    seen = {}
    data, other = np.arange(3.0), np.zeros(2, np.int32)

    def kernel(*args):
        seen["args"] = args
        seen["x"] = args[0].copy()

    with stf.context(backend=backend) as ctx:
        ld, lo = ctx.logical_data(data), ctx.logical_data(other)
        with ctx.cuda_kernel(ld.read(), lo.rw(), ctx.token().read()) as k:
            counter = ctypes.c_int(5)
            k.launch(
                kernel,
                1,
                1,
                (
                    k.get_arg(0),
                    ctypes.c_void_p(k.get_arg(1)),
                    counter,
                    7,
                    1.5,
                    2j,
                    np.float32(0.25),
                    True,
                ),
            )
            counter.value = 99  # values are captured at the call
    x, o, count, seven, real, cplx, single, flag = seen["args"]
    np.testing.assert_array_equal(seen["x"], data)
    assert not x.flags.writeable and o.flags.writeable  # read() -> read-only (I-21)
    assert o.dtype == np.int32 and o.shape == (2,)
    assert count == 5 and seven == 7 and real == 1.5 and cplx == 2j
    assert single == np.float32(0.25) and flag is True


def test_kernel_exception_is_raised_at_the_next_sync_point(backend):
    if backend != "emulated":
        pytest.skip("Python callables run on the emulated backend")
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(np.zeros(2))
        with ctx.cuda_kernel(ld.read()) as k:
            k.launch(lambda x: x.__setitem__(0, 1.0), 1, 1, (k.get_arg(0),))
        with ctx.cuda_kernel(ld.rw()) as k:  # starts after the failed launch
            k.launch(lambda x: x.__setitem__(0, 3.0), 1, 1, (k.get_arg(0),))
        ctx.fence()  # never raises deferred errors (I-7)
        with pytest.raises(ValueError, match="read-only"):
            ctx.check_errors()
        assert ctx.wait(ld)[0] == 3.0  # the context stays usable


def test_per_dependency_places_are_honoured(backend):
    seen = []
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(np.arange(4.0))
        with ctx.cuda_kernel(
            stf.exec_place.device(0), ld.read(stf.data_place.host())
        ) as k:
            seen.append(ctx._live().backend.locate(k.get_arg(0)))
            assert k.get_arg_cai(0).shape == (4,)
        with ctx.cuda_kernel(ld.read()) as k:
            seen.append(ctx._live().backend.locate(k.get_arg(0)))
    assert seen == [HOST, 0]


def test_cuda_function_on_the_emulated_backend(backend):
    if backend != "emulated":
        pytest.skip("checks the emulated backend")
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(np.zeros(2))
        with ctx.cuda_kernel(ld.rw()) as k:
            with pytest.raises(BackendUnavailableError, match="CUDA backend"):
                k.launch(0x1234, 1, 1, (k.get_arg(0),))
            with pytest.raises(TypeError, match="callable"):
                k.launch("kernel", 1, 1, ())


@pytest.mark.parametrize(
    "grid, block, error",
    [
        (np.int64(2), 1, TypeError),
        (1, np.int32(4), TypeError),
        (2.5, 1, TypeError),
        (None, 1, TypeError),
        (0, 1, ValueError),
        ((1, 0), 1, ValueError),
        ((1, 1, 1, 1), 1, ValueError),
        ((), 1, ValueError),
        (-3, 1, ValueError),
        (1, ("a",), ValueError),
        (1, (32, -1), ValueError),
    ],
)
def test_bad_grid_and_block(backend, grid, block, error):
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(np.zeros(2))
        with ctx.cuda_kernel(ld.rw()) as k:
            with pytest.raises(error):
                k.launch(_axpy_emulated, grid, block, ())


def test_bad_arguments_and_shmem(backend):
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(np.zeros(2))
        with ctx.cuda_kernel(ld.rw()) as k:
            for bad in (
                [1, 2],
                "text",
                None,
                object(),
                np.zeros(2),
                k.get_arg_cai(0),
                np.array([1.0]).astype(object)[0:1],
            ):
                with pytest.raises(TypeError, match="argument 0"):
                    k.launch(_axpy_emulated, 1, 1, (bad,))
            with pytest.raises(ValueError, match="64 bits"):
                k.launch(_axpy_emulated, 1, 1, (2**64,))
            with pytest.raises(ValueError, match="shmem"):
                k.launch(_axpy_emulated, 1, 1, (), shmem=-1)
            with pytest.raises(TypeError, match="shmem"):
                k.launch(_axpy_emulated, 1, 1, (), shmem=1.0)
            with pytest.raises(TypeError, match="args"):
                k.launch(_axpy_emulated, 1, 1, 5)


def test_marshalling_gives_exact_c_types():
    assert isinstance(_pack(3, 0), ctypes.c_int64) and _pack(-1, 0).value == -1
    assert isinstance(_pack(True, 0), ctypes.c_int64) and _pack(True, 0).value == 1
    assert isinstance(_pack(2**63 + 1, 0), ctypes.c_uint64)
    assert isinstance(_pack(1.5, 0), ctypes.c_double)
    packed = _pack(1 + 2j, 0)
    assert ctypes.sizeof(packed) == 16 and (packed.real, packed.imag) == (1.0, 2.0)
    assert bytes(_pack(np.float32(0.5), 0)) == np.float32(0.5).tobytes()
    assert ctypes.sizeof(_pack(np.int16(3), 0)) == 2
    assert ctypes.sizeof(_pack(np.complex64(1j), 0)) == 8
    value = ctypes.c_int(4)
    packed_int = _pack(value, 0)
    value.value = 8
    assert isinstance(packed_int, ctypes.c_int) and packed_int.value == 4


def test_lifecycle_rules(backend):
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(np.zeros(2))
        k = ctx.cuda_kernel(ld.rw(), symbol="k")
        assert "cuda_kernel 'k'" in repr(k) or "'k'" in repr(k)
        with pytest.raises(ScopeError, match="launch"):
            k.launch(_axpy_emulated, 1, 1, ())
        k.start()
        with pytest.raises(ScopeError):
            k.add_dep(ld.read())
        k.end()
        with pytest.raises(ScopeError, match="launch"):
            k.launch(_axpy_emulated, 1, 1, ())
        with pytest.raises(ScopeError):
            k.end()
        for name in ("stream_ptr", "args_cai", "get_grid_dims", "get_stream_ptrs"):
            assert not hasattr(k, name)
        empty = stf.cuda_kernel(ctx)
        empty.add_dep(ld.read())
        empty.set_symbol("late")
        empty.set_exec_place(stf.exec_place.device(0))
        with empty:
            assert empty.get_arg(0) != 0
        with pytest.raises(TypeError):
            stf.cuda_kernel()
        with pytest.raises(TypeError):
            ctx.cuda_kernel("not a dep")
    with pytest.raises(ContextFinalizedError):
        ctx.cuda_kernel(ld.read())


def test_exported_names():
    from stflow import _stf_bindings

    assert _stf_bindings.cuda_kernel is stf.cuda_kernel
    assert _stf_bindings.dlpack_export is stf.dlpack_export
    for name in ("cuda_kernel", "dlpack_export", "DeviceArray"):
        assert name in stf.__all__


def test_cuda_function_handles(backend, axpy):
    if backend != "cuda":
        pytest.skip("CUDA function handles")
    from cuda.bindings import driver

    err, function = driver.cuKernelGetFunction(axpy.handle)
    assert not err
    n = 256
    x, y = np.arange(n, dtype=np.float64), np.zeros(n)
    with stf.context(backend=backend) as ctx:
        lx, ly = ctx.logical_data(x), ctx.logical_data(y)
        with ctx.cuda_kernel(lx.read(), ly.rw()) as k:
            k.launch(
                int(function), 1, n, (1.0, k.get_arg(0), k.get_arg(1), ctypes.c_int(n))
            )
            with pytest.raises(TypeError, match="CUfunction"):
                k.launch(_axpy_emulated, 1, 1, ())
    np.testing.assert_array_equal(y, x)


def test_cupy_raw_kernel(backend):
    if backend != "cuda":
        pytest.skip("CUDA function handles")
    cupy = pytest.importorskip("cupy")
    kernel = cupy.RawKernel(AXPY_SOURCE, "axpy")
    n = 300
    x, y = np.arange(n, dtype=np.float64), np.ones(n)
    with stf.context(backend=backend) as ctx:
        lx, ly = ctx.logical_data(x), ctx.logical_data(y)
        with ctx.cuda_kernel(lx.read(), ly.rw()) as k:
            k.launch(kernel, 3, 128, (3.0, k.get_arg(0), k.get_arg(1), ctypes.c_int(n)))
    np.testing.assert_array_equal(y, 1 + 3 * np.arange(n))


def test_messages_name_the_cuda_kernel(backend):
    with stf.context(backend=backend) as ctx:
        kernel = ctx.cuda_kernel(symbol="axpy")
        assert str(kernel) == "cuda_kernel 'axpy'"
        with pytest.raises(ScopeError, match="cuda_kernel 'axpy'"):
            kernel.end()


def test_cuda_kernel_in_graph_mode(backend, axpy):
    # API.md 3.16/3.17: in graph mode the launches become nodes of the epoch's graph;
    # they run at the next fence/wait/finalize, several times if recorded several times.
    n = 256
    x, y = np.arange(n, dtype=np.float64), np.zeros(n)
    with stf.context(backend=backend, use_graph=True) as ctx:
        lx, ly = ctx.logical_data(x), ctx.logical_data(y)
        for _ in range(3):
            with ctx.cuda_kernel(lx.read(), ly.rw()) as k:
                k.launch(
                    axpy,
                    (n + 127) // 128,
                    128,
                    (1.0, k.get_arg(0), k.get_arg(1), ctypes.c_int(n)),
                )
        assert ctx.statistics().graph_instantiations == 0  # recorded only
        np.testing.assert_array_equal(ctx.wait(ly), 3 * np.arange(n))
