"""Review: failing tests for bugs and spec deviations found in the Tier-1 core.

Each test names the API.md section (or the expected behaviour) it checks. They fail
today; the fixes are described in the review report.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref

import numpy as np
import pytest

import stflow as stf
from stflow.errors import ContextFinalizedError


def _emulated_only(backend):
    if backend != "emulated":
        pytest.skip("uses stflow.emulated.launch to hold streams back")


# -- logical data ----------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(), (3, 0)], ids=["0-d", "zero-size"])
def test_empty_like_keeps_shape_of_0d_and_zero_size_data(backend, shape):
    # API.md 3.5: empty_like() -> "same shape and dtype" (registered data may be 0-d or empty)
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(np.zeros(shape, np.float32))
        y = x.empty_like()
        assert (y.shape, y.dtype) == (shape, np.dtype(np.float32))


@pytest.mark.parametrize("dtype", ["M8[s]", "m8[ms]", "V8"])
def test_register_fixed_size_arrays_without_buffer_format(backend, dtype):
    # API.md 3.4 / I-41: every fixed-size dtype is usable; dtype comes from the array
    a = np.zeros(3, dtype)
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(a)
        assert x.dtype == a.dtype
        assert ctx.wait(x).dtype == a.dtype


def test_padded_structured_dtype_views_keep_the_dtype(backend):
    if backend != "emulated":
        pytest.skip(
            "host access to a task view (numpy.asarray) is the emulated "
            "backend's; CUDA views are device memory"
        )
    # API.md 4: numpy.asarray(view) is a zero-copy view of the data (same dtype); 3.7 same
    dt = np.dtype([("a", "u1"), ("b", "f8")], align=True)  # a C struct with padding
    src = np.zeros(3, dt)
    src["b"] = [1.0, 2.0, 3.0]
    seen = []
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(np.zeros(3, dt))
        with ctx.task(stf.exec_place.host(), x.write()) as t:
            t.stream_ptr()
            view = np.asarray(t.get_arg_cai(0))
            assert view.dtype == dt
            view[...] = src
        ctx.host_launch(x.read(), fn=lambda arr: seen.append(arr.dtype))
        ctx.wait(x)
    assert seen == [dt]


def test_huge_shape_does_not_wrap_to_a_tiny_allocation(backend):
    # API.md 3.4: size is prod(shape) * itemsize (2**64 bytes here), never 0 by overflow
    with pytest.raises((MemoryError, ValueError, OverflowError)):
        with stf.context(backend=backend) as ctx:
            ld = ctx.logical_data_full((2**62, 4), 1, dtype=np.uint8)
            assert f"len={2**64}" in repr(ld)


# -- collected logical data --------------------------------------------------------------


@pytest.mark.timeout(20)
def test_wait_completes_write_back_of_collected_data(backend):
    # API.md 3.5: a collected logical data's write-back is "complete by the context's
    # next fence() stream, wait() or finalize()"
    _emulated_only(backend)
    import stflow.emulated as em

    a = np.zeros(4)

    def slow(arr):
        time.sleep(0.3)
        arr[:] = 7.0

    with stf.context(backend=backend) as ctx:
        y = ctx.logical_data(np.zeros(0))  # any data; this one needs no copy
        x = ctx.logical_data(a)
        with ctx.task(x.rw()) as t:
            em.launch(t.stream_ptr(), slow, t.get_arg_cai(0))
        del x, t
        gc.collect()
        ctx.wait(y)
        assert a.tolist() == [7.0] * 4, "write-back of the collected data not complete"


def test_collected_data_releases_user_buffer_after_write_back(backend):
    # API.md 1.1 "nothing leaks": once a collected data was written back, the runtime
    # must not keep its user buffer alive until finalize() (unbounded growth in loops)
    refs = []
    with stf.context(backend=backend) as ctx:
        y = ctx.logical_data(np.zeros(1))
        for _ in range(10):
            a = np.zeros(1000)
            refs.append(weakref.ref(a))
            x = ctx.logical_data(a)
            with ctx.task(x.rw()) as t:
                t.get_arg(0)
            del x, t, a
            gc.collect()
            ctx.wait(y)
        ctx.fence()
        ctx.wait(y)
        gc.collect()
        alive = sum(r() is not None for r in refs)
        assert alive <= 1, f"{alive} dropped user buffers still held by the context"


# -- deferred errors ----------------------------------------------------------------------


@pytest.mark.timeout(20)
def test_async_errors_are_raised_in_submission_order(backend):
    # API.md 1.1 / I-7: pending exceptions are raised one per call, oldest first
    _emulated_only(backend)
    import stflow.emulated as em

    def first(arr):
        raise KeyError("first")

    def second(arr):
        raise IndexError("second")

    orders = []
    for _ in range(8):
        ctx = stf.context(backend=backend)
        x = ctx.logical_data(np.zeros(4))
        y = ctx.logical_data(np.zeros(4))
        with ctx.task(x.rw()) as t:
            em.launch(t.stream_ptr(), time.sleep, 0.02)
        ctx.host_launch(x.read(), fn=first)  # submitted first, runs after the task
        ctx.host_launch(y.read(), fn=second)  # submitted second, ready at once
        with pytest.raises(Exception) as info:
            ctx.finalize()
        order = [type(info.value).__name__]
        with pytest.raises(Exception) as later:
            ctx.check_errors()
        order.append(type(later.value).__name__)
        orders.append(order)
    assert all(order == ["KeyError", "IndexError"] for order in orders), orders


@pytest.mark.timeout(20)
def test_caller_stream_context_reports_late_errors_when_collected(backend):
    # API.md I-7: errors a caller-stream context captures after finalize() are raised by
    # check_errors() "or reported as RuntimeWarning when the context is collected"
    _emulated_only(backend)
    import stflow.emulated as em

    def boom():
        raise KeyError("late")

    with stf.context(backend=backend) as outer:
        x = outer.logical_data(np.zeros(4))
        with outer.task(x.rw()) as t:
            em.launch(t.stream_ptr(), time.sleep, 0.2)  # the callback runs after finalize
            inner = stf.context(stream=t.stream_ptr(), backend=backend)
            inner.host_launch(fn=boom)
            inner.finalize()  # nothing captured yet
        outer.wait(x)  # the callback has run now
        with pytest.warns(RuntimeWarning, match="late"):
            del inner
            gc.collect()


# -- failures inside start() ------------------------------------------------------------


@pytest.mark.timeout(20)
def test_failed_start_leaves_no_untracked_copy_behind(backend):
    # API.md 1.1: "After an exception the context stays usable"; a copy enqueued by a
    # start() that then failed (out of memory) must not overwrite a later task's write
    _emulated_only(backend)
    import stflow.emulated as em

    a = np.arange(4.0)
    started, gate = threading.Event(), threading.Event()

    def hold():
        started.set()
        gate.wait(10)

    dev0 = stf.exec_place.device(0)
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(a)
        huge = ctx.logical_data_empty((2**50,), np.uint8)
        em.launch(ctx.fence(), hold)  # hold the emulated device
        assert started.wait(10)
        with pytest.raises(MemoryError):
            with ctx.task(dev0, x.read(), huge.write()):  # copies x, then OOM on huge
                pass
        for _ in range(3):  # round-robin back to that stream
            with ctx.task(dev0):
                pass
        with ctx.task(dev0, x.write()) as t:
            np.asarray(t.get_arg_cai(0))[:] = 42.0
        gate.set()
        assert ctx.wait(x).tolist() == [42.0] * 4
    assert a.tolist() == [42.0] * 4


# -- threads and finalize ----------------------------------------------------------------


@pytest.mark.timeout(20)
def test_finalize_on_another_thread_does_not_lose_a_blocked_task(backend):
    if backend != "emulated":
        pytest.skip("the bodies touch task views from the host (emulated backend)")
    # API.md 3.3 / Threads: a task either runs before finalize() completes (its write
    # reaches the user buffer) or its start() raises ContextFinalizedError; never a
    # task started on a finalized context (lost write or AttributeError)
    problems = []
    for _ in range(8):
        a = np.zeros(1)
        ctx = stf.context(backend=backend)
        x = ctx.logical_data(a)
        t1 = ctx.task(stf.exec_place.host(), x.rw())
        t1.start()
        result = {}

        def second(ctx=ctx, x=x, result=result):
            try:
                with ctx.task(stf.exec_place.host(), x.rw()) as t2:
                    np.asarray(t2.get_arg_cai(0))[:] += 10
                result["ran"] = True
            except ContextFinalizedError:
                result["refused"] = True
            except Exception as exc:  # noqa: BLE001
                result["error"] = repr(exc)

        blocked = threading.Thread(target=second)
        blocked.start()
        time.sleep(0.02)  # t2 waits for t1
        closer = threading.Thread(target=ctx.finalize)
        closer.start()
        time.sleep(0.02)  # finalize waits for t1
        np.asarray(t1.get_arg_cai(0))[:] += 1
        t1.end()
        blocked.join(10)
        closer.join(10)
        if "error" in result:
            problems.append(result["error"])
        elif "ran" in result and a[0] != 11:
            problems.append(f"t2 ran but its write was lost: {a[0]}")
    assert not problems, problems


# -- finalized context -------------------------------------------------------------------


@pytest.mark.parametrize("method", ["add_dep", "set_exec_place", "end", "stream_ptr"])
def test_task_methods_after_finalize_raise_context_finalized(backend, method):
    # API.md I-5: every method of a finalized context's tasks raises ContextFinalizedError
    ctx = stf.context(backend=backend)
    x = ctx.logical_data(np.zeros(2))
    t = ctx.task()
    d = x.read()
    ctx.finalize()
    call = {
        "add_dep": lambda: t.add_dep(d),
        "set_exec_place": lambda: t.set_exec_place(stf.exec_place.host()),
        "end": t.end,
        "stream_ptr": t.stream_ptr,
    }[method]
    with pytest.raises(ContextFinalizedError):
        call()
