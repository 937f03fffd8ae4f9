"""Behaviour of contexts, logical data, tasks and host callbacks, on every backend."""

from __future__ import annotations

import gc
import threading
import warnings

import numpy as np
import pytest
from helpers.bodies import add_to, arrays_of, fill_with

import stflow as stf
from stflow.errors import ContextFinalizedError, ScopeError, UnfinalizedContextWarning


def test_quickstart_writes_the_result_back(backend):
    X = np.ones(1 << 12)
    Y = np.zeros(1 << 12)
    seen = []
    with stf.context(backend=backend) as ctx:
        lX, lY = ctx.logical_data(X), ctx.logical_data(Y)
        with ctx.task(stf.exec_place.device(0), lX.read(), lY.rw()) as t:
            add_to(t, 1, 0, 2.0)  # y += 2 * x on the task stream
        ctx.host_launch(lY.read(), fn=lambda y: seen.append(y[:4].copy()))
    np.testing.assert_array_equal(Y, np.full(1 << 12, 2.0))
    np.testing.assert_array_equal(seen[0], [2.0] * 4)


def test_wait_returns_a_host_copy_and_keeps_the_data_usable(backend):
    Y = np.arange(8.0)
    with stf.context(backend=backend) as ctx:
        lY = ctx.logical_data(Y)
        with ctx.task(stf.exec_place.device(0), lY.rw()) as t:
            fill_with(t, 0, 5.0)
        first = ctx.wait(lY)
        first[:] = -1  # a copy: changing it changes nothing
        with ctx.task(stf.exec_place.device(0), lY.rw()) as t:
            fill_with(t, 0, 6.0)
        np.testing.assert_array_equal(ctx.wait(lY), np.full(8, 6.0))
    np.testing.assert_array_equal(Y, np.full(8, 6.0))


def test_chain_across_devices_and_host(backend):
    devices = stf.backends.get_backend(backend).device_count
    places = [stf.exec_place.host()] + [stf.exec_place.device(d) for d in range(devices)]
    X = np.zeros(100)
    with stf.context(backend=backend) as ctx:
        lX = ctx.logical_data(X, name="x")
        for step in range(12):
            with ctx.task(places[step % len(places)], lX.rw()) as t:
                add_to(t, 0, None, 1.0)  # x += 1
    np.testing.assert_array_equal(X, np.full(100, 12.0))


def test_data_place_overrides(backend):
    A = np.full(16, 3.0)
    B = np.zeros(16)
    with stf.context(backend=backend) as ctx:
        lA, lB = ctx.logical_data(A), ctx.logical_data(B)
        # Read A in managed memory, write B in host memory, from device 0.
        with ctx.task(
            stf.exec_place.device(0),
            lA.read(stf.data_place.managed()),
            lB.rw(stf.data_place.host()),
        ) as t:
            add_to(t, 1, 0, 1.0)
        assert ctx.wait(lB)[0] == 3.0
    assert B[0] == 3.0


def test_full_zeros_ones_and_dtype_inference(backend):
    with stf.context(backend=backend) as ctx:
        full = ctx.logical_data_full((3, 4), 7)
        zeros = ctx.logical_data_zeros((5,), dtype=np.int32)
        ones = ctx.logical_data_ones((2,), exec_place=stf.exec_place.host())
        cplx = ctx.logical_data_full((2,), 1 + 2j, where=stf.data_place.host())
        assert full.dtype == np.int64 and full.shape == (3, 4)
        np.testing.assert_array_equal(ctx.wait(full), np.full((3, 4), 7))
        np.testing.assert_array_equal(ctx.wait(zeros), np.zeros(5, np.int32))
        np.testing.assert_array_equal(ctx.wait(ones), np.ones(2))
        np.testing.assert_array_equal(ctx.wait(cplx), np.full(2, 1 + 2j))


def test_host_launch_views_and_extra_args(backend):
    A = np.arange(4.0)
    B = np.zeros(4)
    calls = []

    def fn(a, b, scale, tag):
        calls.append((a.flags.writeable, b.flags.writeable, tag))
        b[:] = a * scale

    with stf.context(backend=backend) as ctx:
        lA, lB = ctx.logical_data(A), ctx.logical_data(B)
        ctx.host_launch(lA.read(), lB.write(), fn=fn, args=[10.0, "t"], symbol="scale")
    assert calls == [(False, True, "t")]
    np.testing.assert_array_equal(B, A * 10)


def test_host_callback_errors_are_raised_at_the_next_sync_point(backend):
    def boom(_):
        raise KeyError("from the callback")

    ctx = stf.context(backend=backend)
    ld = ctx.logical_data(np.zeros(2))
    ctx.host_launch(ld.rw(), fn=boom)
    with pytest.raises(KeyError, match="from the callback") as info:
        ctx.wait(ld)  # waits for boom, then raises
    assert "raised by host_launch" in str(info.value.__notes__)
    ctx.check_errors()  # cleared: nothing left
    ctx.host_launch(ld.rw(), fn=lambda a: a.fill(4.0))  # the context stays usable
    assert ctx.wait(ld)[0] == 4.0
    ctx.host_launch(ld.rw(), fn=boom)
    with pytest.raises(KeyError):
        ctx.finalize()  # waits for everything, then raises
    ctx.finalize()


def test_several_errors_are_raised_one_per_call_in_order(backend):
    # API I-7: oldest first, one per call; the rest stay for check_errors().
    ctx = stf.context(backend=backend)
    ld = ctx.logical_data(np.zeros(2))
    for number in range(3):
        ctx.host_launch(ld.rw(), fn=_raiser(number))
    with pytest.raises(KeyError, match="'0'") as info:
        ctx.finalize()
    assert any("2 more pending" in note for note in info.value.__notes__)
    assert [str(e) for e in ctx.pending_errors()] == ["'1'", "'2'"]
    ctx.finalize()  # idempotent: raises nothing more
    with pytest.raises(KeyError, match="'1'"):
        ctx.check_errors()
    with pytest.raises(KeyError, match="'2'"):
        ctx.check_errors()
    ctx.check_errors()  # nothing pending
    assert ctx.pending_errors() == []


def _raiser(number):
    def fn(_):
        raise KeyError(str(number))

    return fn


def test_task_body_exception_propagates_and_the_task_is_ended(backend):
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(np.zeros(3))
        with pytest.raises(ZeroDivisionError):
            with ctx.task(ld.rw()) as t:
                1 / 0
        with pytest.raises(ScopeError):
            t.end()
        with ctx.task(ld.rw()) as t:
            fill_with(t, 0, 1.0)
        assert ctx.wait(ld)[0] == 1.0


def test_finalize_is_idempotent_and_use_after_raises(backend):
    ctx = stf.context(backend=backend)
    ld = ctx.logical_data(np.zeros(2))
    ctx.finalize()
    ctx.finalize()
    for attempt in (
        lambda: ctx.task(),
        lambda: ctx.token(),
        lambda: ctx.fence(),
        lambda: ctx.wait(ld),
        lambda: ctx.logical_data(np.zeros(1)),
        lambda: ctx.host_launch(fn=print),
        lambda: ld.rw(),
        lambda: ctx.logical_data_zeros((2,)),
    ):
        with pytest.raises(ContextFinalizedError):
            attempt()


def test_collected_context_warns_and_never_writes_back(backend):
    # API I-6: like the reference, a collected context never writes the user's array.
    Y = np.zeros(4)
    ctx = stf.context(backend=backend)
    ld = ctx.logical_data(Y, name="Y")
    with ctx.task(stf.exec_place.device(0), ld.rw()) as t:
        fill_with(t, 0, 9.0)
    del t
    with (
        pytest.warns(ResourceWarning, match="without an explicit finalize"),
        pytest.warns(UnfinalizedContextWarning, match="'Y' were NOT"),
    ):
        del ctx
        gc.collect()
    np.testing.assert_array_equal(Y, np.zeros(4))
    with pytest.raises(ContextFinalizedError):
        ld.read()


def test_collected_logical_data_is_written_back_before_finalize(backend):
    Y = np.zeros(4)
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(Y)
        with ctx.task(stf.exec_place.device(0), ld.rw()) as t:
            fill_with(t, 0, 2.0)
        del ld, t
        gc.collect()
        other = ctx.logical_data(np.zeros(1))
        ctx.wait(other)  # the write-back is complete by now
        np.testing.assert_array_equal(Y, np.full(4, 2.0))


def test_tokens_order_host_callbacks(backend):
    log = []
    with stf.context(backend=backend) as ctx:
        token = ctx.token()
        assert token.shape is None and token.dtype is None
        for number in range(5):
            ctx.host_launch(token.rw(), fn=lambda n=number: log.append(n))
    assert log == list(range(5))


def test_token_in_a_task_has_no_view(backend):
    with stf.context(backend=backend) as ctx:
        token, ld = ctx.token(), ctx.logical_data(np.zeros(2))
        with ctx.task(token.rw(), ld.rw()) as t:
            view = t.args_cai()  # only the data's view
            assert not isinstance(view, tuple)
            with pytest.raises(TypeError, match="token"):
                t.get_arg(0)


def test_read_only_sources(backend):
    data = np.arange(3.0)
    data.setflags(write=False)
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(data)
        raw = ctx.logical_data(b"\x01\x02\x03")
        assert ld.readonly and raw.readonly and raw.dtype == np.uint8
        out = ctx.logical_data(np.zeros(3))
        with ctx.task(stf.exec_place.device(0), ld.read(), out.rw()) as t:
            add_to(t, 1, 0, 1.0)
        np.testing.assert_array_equal(ctx.wait(out), [0.0, 1.0, 2.0])
        np.testing.assert_array_equal(ctx.wait(raw), [1, 2, 3])


def test_same_data_twice_in_one_task(backend):
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(np.ones(4))
        with ctx.task(ld.read(), ld.rw()) as t:
            first, second = t.args_cai()
            assert first.ptr == second.ptr
            add_to(t, 1, 0, 1.0)  # x += x
        np.testing.assert_array_equal(ctx.wait(ld), np.full(4, 2.0))


def test_threads_submitting_to_one_context(backend):
    X = np.zeros(8)
    with stf.context(backend=backend) as ctx:
        lX = ctx.logical_data(X)

        def worker():
            for _ in range(25):
                ctx.host_launch(lX.rw(), fn=lambda x: x.__iadd__(1.0))
                with ctx.task(lX.rw()) as t:
                    add_to(t, 0, None, 1.0)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    np.testing.assert_array_equal(X, np.full(8, 200.0))


def test_nested_context_on_a_task_stream(backend):
    X = np.zeros(6)
    with stf.context(backend=backend) as outer:
        lX = outer.logical_data(X)
        with outer.task(stf.exec_place.device(0), lX.rw()) as t:
            view = t.get_arg_cai(0)
            with stf.context(stream=t.stream_ptr(), backend=backend) as inner:
                part = inner.logical_data(_wrap(view, backend))
                with inner.task(stf.exec_place.device(0), part.rw()) as it:
                    fill_with(it, 0, 3.0)
                with inner.task(
                    stf.exec_place.device(1 % _devices(backend)), part.rw()
                ) as it:
                    add_to(it, 0, None, 1.0)
        np.testing.assert_array_equal(outer.wait(lX), np.full(6, 4.0))


def _devices(backend):
    return stf.backends.get_backend(backend).device_count


def _wrap(view, backend):
    if backend == "emulated":
        return view  # __array_interface__
    return view  # CUDA Array Interface


def test_borrowed_context_submits_into_the_owner(backend):
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(np.zeros(2))
        borrowed = ld.borrow_ctx_handle()
        assert "borrowed=True" in repr(borrowed)
        borrowed.host_launch(ld.rw(), fn=lambda a: a.fill(5.0))
        borrowed.host_launch(ld.rw(), fn=_raiser(7))
        with pytest.raises(RuntimeError, match="borrowed"):
            borrowed.finalize()
        with borrowed:
            pass  # exit does nothing
        with pytest.raises(KeyError):
            ctx.wait(ld)  # reported into the owner's queue
        assert ctx.wait(ld)[0] == 5.0


def test_explicit_start_end_and_task_members(backend):
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(np.zeros(3, dtype=np.float32), name="v")
        t = ctx.task(symbol="first")
        t.add_dep(ld.rw())
        t.set_exec_place(stf.exec_place.device(0))
        t.start()
        assert t.get_grid_dims() is None
        assert t.get_stream_ptrs() == [t.stream_ptr()]
        assert isinstance(t.stream_ptr(), stf.CudaStream)
        view = t.get_arg_cai(0)
        assert view.shape == (3,) and np.dtype(view.dtype) == np.float32
        assert t.get_arg(0) == view.ptr
        fill_with(t, 0, 1.5)
        t.end()
        assert ctx.wait(ld).tolist() == [1.5] * 3


def test_logical_data_members(backend):
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(np.zeros((2, 3), np.float32))
        assert ld.symbol is None
        ld.set_symbol("grid")
        assert repr(ld) == (
            "logical_data(shape=(2, 3), dtype=float32, is_token=False, "
            "symbol='grid', len=24, ndim=2)"
        )
        twin = ld.empty_like()
        assert twin.shape == (2, 3) and twin.symbol is None and not twin.readonly
        made = stf.logical_data(ctx, np.ones(2), name="made")
        assert made.symbol == "made" and made.shape == (2,)
        assert ld == ld and ld != twin and hash(ld) == id(ld) or True


def test_empty_data_reads_poison_before_any_write():
    with stf.context(backend="emulated") as ctx:
        ld = ctx.logical_data_empty((4,), np.float32)
        assert np.isnan(ctx.wait(ld)).all()
        ints = ctx.logical_data_empty((4,), np.int16)
        assert (ctx.wait(ints).view(np.uint8) == 0xA5).all()


def test_zero_size_and_zero_dim_buffers(backend):
    empty = np.zeros(0)
    scalar = np.array(2.0)
    with stf.context(backend=backend) as ctx:
        le, ls = ctx.logical_data(empty), ctx.logical_data(scalar)
        assert ls.shape == ()
        ctx.host_launch(le.rw(), ls.rw(), fn=lambda e, s: s.__imul__(3.0))
        assert ctx.wait(le).shape == (0,)
    assert scalar == 6.0


def test_many_contexts_release_their_streams(backend):
    for _ in range(30):
        with stf.context(backend=backend) as ctx:
            ld = ctx.logical_data_zeros((64,))
            with ctx.task(ld.rw()) as t:
                add_to(t, 0, None, 1.0)
            assert ctx._runtime.root_pools.streams
        assert not ctx._runtime.root_pools.streams and not ctx._runtime.data.states


def test_no_warning_for_a_clean_program(backend):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with stf.context(backend=backend) as ctx:
            ld = ctx.logical_data(np.ones(2))
            ctx.wait(ld)


def test_arrays_of_helper_roundtrip(backend):
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(np.arange(4.0))
        with ctx.task(ld.read()) as t:
            assert arrays_of(t) is not None


def test_write_after_read_waits_for_a_slow_reader(backend):
    """A writer must not overwrite data a slower reader on another stream still reads."""
    import time

    X = np.ones(8)
    Y = np.zeros(8)

    def slow_copy(x, y):
        time.sleep(0.05)
        y[:] = x

    with stf.context(backend=backend) as ctx:
        lX, lY = ctx.logical_data(X), ctx.logical_data(Y)
        ctx.host_launch(lX.read(), lY.write(), fn=slow_copy)
        with ctx.task(stf.exec_place.host(), lX.rw()) as t:
            if backend == "emulated":  # the body itself runs concurrently
                np.asarray(t.get_arg_cai(0)).fill(99.0)
            else:  # a kernel on the task stream
                fill_with(t, 0, 99.0)
    np.testing.assert_array_equal(Y, np.ones(8))
    np.testing.assert_array_equal(X, np.full(8, 99.0))


def test_read_after_write_sees_a_slow_writer(backend):
    import time

    X = np.zeros(8)

    def slow_fill(x):
        time.sleep(0.05)
        x.fill(3.0)

    with stf.context(backend=backend) as ctx:
        lX = ctx.logical_data(X)
        ctx.host_launch(lX.rw(), fn=slow_fill)
        with ctx.task(stf.exec_place.device(0), lX.rw()) as t:
            add_to(t, 0, None, 1.0)
        np.testing.assert_array_equal(ctx.wait(lX), np.full(8, 4.0))


def test_exec_place_scopes_nest_and_restore_the_current_device(backend):
    from stflow.backends import get_backend

    native = get_backend(backend)
    before = native.current_device()
    last = native.device_count - 1
    place = stf.exec_place.device(last)
    with place:
        assert native.current_device() == last
        with stf.exec_place.device(0):
            with place:
                assert native.current_device() == last
            assert native.current_device() == 0
        assert native.current_device() == last
    assert native.current_device() == before


def test_place_factories_and_members():
    host, dev, managed, affine = (
        stf.data_place.host(),
        stf.data_place.device(1),
        stf.data_place.managed(),
        stf.data_place.affine(),
    )
    assert [p.kind for p in (host, dev, managed, affine)] == [
        "host",
        "dev1",
        "managed",
        "affine",
    ]
    assert [p.device_id for p in (host, dev, managed, affine)] == [-1, 1, -2, -3]
    assert dev.allocation_is_stream_ordered and not host.allocation_is_stream_ordered
    assert repr(dev) == "data_place('dev1')"
    assert stf.data_place.current_device().device_id >= 0
    ep = stf.exec_place.device(1)
    assert ep.kind == "device" and stf.exec_place.host().kind == "host"
    assert ep.dims == (1,) and ep.size == 1 and ep[0] is ep
    assert ep.affine_data_place.device_id == 1
    ep.set_affine_data_place(stf.data_place.managed())
    assert ep.affine_data_place.kind == "managed"
    with pytest.raises(IndexError):
        ep.get_place(1)


def test_data_place_allocate_and_deallocate():
    for place in (
        stf.data_place.host(),
        stf.data_place.device(0),
        stf.data_place.managed(),
    ):
        ptr = place.allocate(256)
        assert ptr != 0
        place.deallocate(ptr, 256)
    assert stf.data_place.device(0).allocate(0) == 0
    stf.data_place.device(0).deallocate(0, 0)


def test_accessors_build_the_dependency_dep_builds(backend):
    """``ld.read()/write()/rw()`` without a place fill the dependency in one frame
    (the accessors every task calls); it must be the one ``dep(ld, mode)`` builds,
    plan key included, and stop being built once the context is finalized."""
    ctx = stf.context(backend=backend)
    ld = ctx.logical_data(np.arange(4.0), name="x")
    modes = {"read": stf.AccessMode.READ, "write": stf.AccessMode.WRITE}
    modes["rw"] = stf.AccessMode.RW
    for name, mode in modes.items():
        fast, built = getattr(ld, name)(), stf.dep(ld, mode)
        assert type(fast) is stf.dep
        assert (fast.ld, fast.mode, fast.dplace, fast.place, fast.key) == (
            built.ld,
            built.mode,
            built.dplace,
            built.place,
            built.key,
        )
        assert type(fast.mode) is int and fast.get_ld() is ld
    with ctx.task(ld.rw()) as t:
        t.run(lambda xp, a: a.__imul__(2))
    ctx.finalize()
    for name in modes:
        with pytest.raises(ContextFinalizedError, match="'x'"):
            getattr(ld, name)()
