"""Contexts on the CUDA backend: task bodies on task streams, host callbacks, CUDA
Array Interface registration of CuPy and PyTorch arrays, and memory hygiene."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from helpers.gpu import cupy_stream, free_device_memory, launch_spin

import stflow as stf
from stflow.errors import PlaceError, ScopeError


def _cupy_views(cupy, t):
    """The task's views as CuPy arrays (call inside ``cupy_stream(t.stream_ptr())``)."""
    views = t.args_cai()
    views = views if isinstance(views, tuple) else (views,)
    return [cupy.asarray(v) for v in views]


def test_context_runs_on_the_cuda_backend():
    with stf.context(backend="cuda") as ctx:
        assert ctx.backend == "cuda"
        zeros = ctx.logical_data_zeros((1000,), np.float32)
        full = ctx.logical_data_full((7, 3), 2 + 3j)
        handle = ctx.fence()
        assert isinstance(handle, int) and handle
        np.testing.assert_array_equal(ctx.wait(zeros), np.zeros(1000, np.float32))
        np.testing.assert_array_equal(ctx.wait(full), np.full((7, 3), 2 + 3j))


def test_cupy_task_bodies_on_the_task_stream(cupy):
    n = 1 << 16
    x = np.arange(n, dtype=np.float64)
    y = np.ones(n)
    with stf.context(backend="cuda") as ctx:
        lx, ly = ctx.logical_data(x, name="x"), ctx.logical_data(y, name="y")
        for _ in range(10):
            with ctx.task(lx.read(), ly.rw(), symbol="axpy") as t:
                with cupy_stream(t.stream_ptr()):
                    vx, vy = _cupy_views(cupy, t)
                    vy += 2 * vx
        with ctx.task(lx.rw()) as t:
            with cupy_stream(t.stream_ptr()):
                (vx,) = _cupy_views(cupy, t)
                vx *= -1
    np.testing.assert_array_equal(y, 1 + 20 * np.arange(n))
    np.testing.assert_array_equal(x, -np.arange(n))


def test_long_kernel_then_dependent_task(cupy):
    """A slow writer, then a reader on whatever stream the runtime picks."""
    out = np.zeros(1, np.int32)
    with stf.context(backend="cuda") as ctx:
        flag = ctx.logical_data_full((1,), -1, dtype=np.int32)
        result = ctx.logical_data(out)
        with ctx.task(flag.rw()) as t:
            launch_spin(t.stream_ptr(), t.get_arg(0), 77)
        with ctx.task(flag.read(), result.write()) as t:
            with cupy_stream(t.stream_ptr()):
                source, target = _cupy_views(cupy, t)
                target[...] = source + 1
    assert out[0] == 78


def test_host_tasks_and_device_tasks_interleave(cupy):
    data = np.arange(1000, dtype=np.int64)
    with stf.context(backend="cuda") as ctx:
        ld = ctx.logical_data(data)
        for step in range(4):
            with ctx.task(ld.rw()) as t:
                with cupy_stream(t.stream_ptr()):
                    (view,) = _cupy_views(cupy, t)
                    view += 1

            def on_host(array, step=step):
                array *= 2

            ctx.host_launch(ld.rw(), fn=on_host)
        expected = np.arange(1000, dtype=np.int64)
        for _ in range(4):
            expected = (expected + 1) * 2
        np.testing.assert_array_equal(ctx.wait(ld), expected)
    np.testing.assert_array_equal(data, expected)


def test_host_launch_sees_device_results_in_order(cupy):
    seen = []
    with stf.context(backend="cuda") as ctx:
        ld = ctx.logical_data_full((4,), 1.0)
        for i in range(5):
            with ctx.task(ld.rw()) as t:
                with cupy_stream(t.stream_ptr()):
                    (view,) = _cupy_views(cupy, t)
                    view += 1
            ctx.host_launch(
                ld.read(),
                fn=lambda a, i=i: seen.append((i, float(a[0]), a.flags.writeable)),
            )
    assert seen == [(i, 2.0 + i, False) for i in range(5)]


def test_host_launch_exception_raised_at_wait_and_finalize():
    ctx = stf.context(backend="cuda")
    ld = ctx.logical_data_zeros((8,))

    def broken(array):
        raise ValueError("bad host work")

    ctx.host_launch(ld.rw(), fn=broken)
    with pytest.raises(ValueError, match="bad host work"):
        ctx.wait(ld)
    np.testing.assert_array_equal(ctx.wait(ld), np.zeros(8))  # still usable
    ctx.host_launch(ld.rw(), fn=broken)
    with pytest.raises(ValueError, match="bad host work"):
        ctx.finalize()
    ctx.finalize()


def test_submitting_from_a_host_callback_raises_scope_error():
    ctx = stf.context(backend="cuda")
    ld = ctx.logical_data_zeros((8,))

    def submits(array):
        ctx.task(ld.rw()).start()

    ctx.host_launch(ld.read(), fn=submits)
    with pytest.raises(ScopeError, match="host callback"):
        ctx.finalize()


# -- CUDA Array Interface registration --------------------------------------------
def test_register_cupy_array_in_place(cupy):
    x = cupy.arange(1 << 12, dtype=cupy.float32)
    with stf.context(backend="cuda") as ctx:
        with pytest.raises(PlaceError, match="device 0"):
            ctx.logical_data(x, dplace=stf.data_place.host())
        ld = ctx.logical_data(x, dplace=stf.data_place.device(0))
        assert ld.shape == x.shape and ld.dtype == np.float32
        with ctx.task(ld.rw()) as t:
            assert t.get_arg(0) == x.data.ptr  # the reference instance itself
            with cupy_stream(t.stream_ptr()):
                (view,) = _cupy_views(cupy, t)
                view *= 3
        seen = []
        ctx.host_launch(ld.read(), fn=lambda a: seen.append(float(a[5])))
        with ctx.task(stf.exec_place.host(), ld.rw()) as t:
            pass
    assert seen == [15.0]
    np.testing.assert_array_equal(cupy.asnumpy(x), 3 * np.arange(1 << 12))


def test_register_cupy_array_written_on_the_host_is_written_back(cupy):
    x = cupy.zeros(100, dtype=cupy.int32)
    with stf.context(backend="cuda") as ctx:
        ld = ctx.logical_data(x)

        def fill(array):
            array[:] = np.arange(100)

        ctx.host_launch(ld.write(), fn=fill)
    np.testing.assert_array_equal(cupy.asnumpy(x), np.arange(100))


def test_register_cupy_array_produced_on_a_stream(cupy):
    producer = cupy.cuda.Stream(non_blocking=True)
    flag = cupy.full(1, -1, dtype=cupy.int32)
    launch_spin(producer.ptr, flag.data.ptr, 11)
    with producer:
        interface = flag.__cuda_array_interface__
    assert interface["stream"] == producer.ptr

    class Produced:
        __cuda_array_interface__ = interface

    with stf.context(backend="cuda") as ctx:
        ld = ctx.logical_data(Produced())  # synchronises the producer stream
        np.testing.assert_array_equal(ctx.wait(ld), [11])


def test_register_torch_tensor_in_place(torch, cupy):
    x = torch.arange(1000, dtype=torch.float64, device="cuda")
    with stf.context(backend="cuda") as ctx:
        with pytest.raises(PlaceError):
            ctx.logical_data(x, dplace=stf.data_place.managed())
        ld = ctx.logical_data(x)
        with ctx.task(ld.rw()) as t:
            stream = torch.cuda.ExternalStream(int(t.stream_ptr()))
            with torch.cuda.stream(stream):
                view = torch.as_tensor(t.get_arg_cai(0), device="cuda")
                view.add_(0.5)
        ctx.host_launch(ld.rw(), fn=lambda a: a.__imul__(2))
    np.testing.assert_array_equal(x.cpu().numpy(), (np.arange(1000) + 0.5) * 2)


def test_caller_stream_context(cupy):
    caller = cupy.cuda.Stream(non_blocking=True)
    data = np.zeros(256, np.float32)
    ctx = stf.context(stream=caller.ptr, backend="cuda")
    ld = ctx.logical_data(data)
    with ctx.task(ld.rw()) as t:
        with cupy_stream(t.stream_ptr()):
            (view,) = _cupy_views(cupy, t)
            view += 4
    ctx.finalize()  # enqueued on the caller stream
    caller.synchronize()
    np.testing.assert_array_equal(data, np.full(256, 4, np.float32))


def test_nested_context_on_a_task_stream(cupy):
    data = np.zeros(64)
    with stf.context(backend="cuda") as outer:
        ld = outer.logical_data(data)
        with outer.task(ld.rw()) as t:
            inner = stf.context(stream=t.stream_ptr(), backend="cuda")
            scratch = inner.logical_data_full((64,), 5.0)
            with inner.task(scratch.rw()) as u:
                with cupy_stream(u.stream_ptr()):
                    (view,) = _cupy_views(cupy, u)
                    view += 1
            inner.finalize()
            with cupy_stream(t.stream_ptr()):
                (target,) = _cupy_views(cupy, t)
                target += 6
    np.testing.assert_array_equal(data, np.full(64, 6.0))


# -- places -------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["host", "managed", "device"])
def test_fill_and_read_at_every_place(where):
    place = {
        "host": stf.data_place.host(),
        "managed": stf.data_place.managed(),
        "device": stf.data_place.device(0),
    }[where]
    with stf.context(backend="cuda") as ctx:
        ld = ctx.logical_data_full((1000,), np.complex128(1 - 1j), where=place)
        np.testing.assert_array_equal(ctx.wait(ld), np.full(1000, 1 - 1j))


# -- memory hygiene ----------------------------------------------------------------
@pytest.mark.device_memory
def test_fifty_contexts_leave_device_memory_unchanged(cuda, cupy):
    def run_one(i):
        with stf.context(backend="cuda") as ctx:
            a = ctx.logical_data_zeros((1 << 20,), np.float64, name=f"a{i}")  # 8 MiB
            b = ctx.logical_data(np.arange(1 << 18, dtype=np.float32))  # 1 MiB
            with ctx.task(a.rw(), b.read()) as t:
                with cupy_stream(t.stream_ptr()):
                    va, vb = _cupy_views(cupy, t)
                    va[: vb.size] += vb
            with ctx.task(stf.exec_place.device(0), b.rw(stf.data_place.managed())):
                pass
            ctx.wait(a)

    def settle():
        gc.collect()  # arrays of earlier tests
        cupy.get_default_memory_pool().free_all_blocks()
        return free_device_memory(cuda)

    run_one(-1)  # warm up pools, kernels, streams
    before = settle()
    for i in range(50):
        run_one(i)
    leaked = before - settle()
    # Each context allocates ~10 MiB of device and managed memory: a leak of one
    # context's worth would show 500 MiB; pool granularity leaves a few MiB of noise.
    assert leaked < 32 << 20, f"{leaked / 2**20:.1f} MiB of device memory leaked"
