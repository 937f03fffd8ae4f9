"""The error model of API.md 1.1 and rows I-6, I-7, I-34.

- Every exception raised where the reference raises a builtin is an instance of that
  builtin and carries the reference's key phrase (a table of call sites).
- Deferred errors: one per call, oldest first, with a note; ``pending_errors()``;
  ``fence()`` never raises them; caller-stream and borrowed contexts.
- A context collected, or alive at exit, without ``finalize()`` never writes into the
  user's arrays, frees everything and warns.
- Task views: ``data: (ptr, False)`` on CUDA; emulated ``read()`` views stay read-only
  and a write that gets through is detected at the end of the task.
"""

from __future__ import annotations

import ctypes
import gc
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import numpy as np
import pytest
from helpers.backends import device_bytes_in_use, make_default
from helpers.bodies import fill_with

import stflow as stf
import stflow.emulated
from stflow._interchange.views import TaskView
from stflow.errors import (
    AccessModeError,
    ContextFinalizedError,
    ContextMismatchError,
    DeviceOrdinalError,
    NegativeCountError,
    NegativeIndexError,
    PlaceAllocationError,
    PlaceError,
    ShapeError,
    STFError,
    TokenArgumentError,
    UnfinalizedContextWarning,
)

pytestmark = pytest.mark.timeout(60)


def _emulated_only(backend):
    if backend != "emulated":
        pytest.skip("needs the emulated backend (stflow.emulated.launch, host pointers)")


class _CAI:
    """A minimal CUDA Array Interface exporter (never dereferenced by the checks)."""

    def __init__(self, **fields):
        interface = {
            "version": 3,
            "shape": (4,),
            "typestr": "<f4",
            "data": (1 << 20, False),
            "strides": None,
        }
        interface.update(fields)
        self.__cuda_array_interface__ = interface


def _other_context_data(ctx, backend):
    other = stf.context(backend=backend)
    ld = other.logical_data(np.zeros(2), name="foreign")
    return other, ld


def _finalized(backend):
    ctx = stf.context(backend=backend)
    ld = ctx.logical_data(np.zeros(2))
    ctx.finalize()
    return ctx, ld


def _token_get_arg(ctx, backend):
    with ctx.task(ctx.token().rw()) as t:
        t.get_arg(0)


def _foreign(call):
    def site(ctx, backend):
        other, ld = _other_context_data(ctx, backend)
        try:
            call(ctx, ld)
        finally:
            other.finalize()

    return site


def _stackable_leaves(call):
    def site(ctx, backend):
        with stf.stackable_context(backend=backend) as sctx:
            a = sctx.logical_data_empty((1,), np.float64, name="a")
            b = sctx.logical_data_empty((1,), np.float64, name="b")
            call(a, b)

    return site


def _nine_terms(a, b):
    expr = a > 0.0
    for _ in range(7):
        expr = expr & (b > 0.0)
    expr & (a > 1.0)


# (site, stflow class, the reference's builtin, the reference's key phrase)
REFERENCE_SITES = [
    pytest.param(
        lambda ctx, b: ctx.task(stf.exec_place.device(99)).start(),
        DeviceOrdinalError,
        RuntimeError,
        "invalid device id",
        id="exec_place.device(99)-task",
    ),
    pytest.param(
        lambda ctx, b: ctx.task(
            ctx.logical_data(np.zeros(2)).rw(stf.data_place.device(99))
        ).start(),
        DeviceOrdinalError,
        RuntimeError,
        "invalid device id",
        id="data_place.device(99)-dependency",
    ),
    pytest.param(
        lambda ctx, b: stf.data_place.device(-1),
        DeviceOrdinalError,
        ValueError,
        "invalid device id",
        id="data_place.device(-1)",
    ),
    pytest.param(
        lambda ctx, b: stf.data_place.affine().allocate(8),
        PlaceAllocationError,
        MemoryError,
        "data_place.allocate failed",
        id="affine.allocate",
    ),
    pytest.param(
        lambda ctx, b: stf.data_place.host().allocate(-1),
        ValueError,
        ValueError,
        "non-negative",
        id="allocate(-1)",
    ),
    pytest.param(
        lambda ctx, b: stf.exec_place.host().get_place(-1),
        NegativeIndexError,
        OverflowError,
        "negative",
        id="get_place(-1)",
    ),
    pytest.param(
        _token_get_arg,
        TokenArgumentError,
        RuntimeError,
        "cannot materialize a token argument",
        id="token-get_arg",
    ),
    pytest.param(
        lambda ctx, b: _finalized(b)[0].fence(),
        ContextFinalizedError,
        RuntimeError,
        "context handle is NULL",
        id="fence-after-finalize",
    ),
    pytest.param(
        lambda ctx, b: (lambda c, ld: c.wait(ld))(*_finalized(b)),
        ContextFinalizedError,
        RuntimeError,
        "context handle is NULL",
        id="wait-after-finalize",
    ),
    pytest.param(
        _foreign(lambda ctx, ld: ctx.task(ld.read())),
        ContextMismatchError,
        ValueError,
        "different context",
        id="task-foreign-data",
    ),
    pytest.param(
        _foreign(lambda ctx, ld: ctx.cuda_kernel(ld.read())),
        ContextMismatchError,
        ValueError,
        "different context",
        id="cuda_kernel-foreign-data",
    ),
    pytest.param(
        _foreign(lambda ctx, ld: ctx.host_launch(ld.read(), fn=print)),
        ContextMismatchError,
        ValueError,
        "different context",
        id="host_launch-foreign-data",
    ),
    pytest.param(
        _foreign(lambda ctx, ld: ctx.wait(ld)),
        ContextMismatchError,
        ValueError,
        "different context",
        id="wait-foreign-data",
    ),
    pytest.param(
        lambda ctx, b: ctx.logical_data(np.zeros(4)).borrow_ctx_handle().finalize(),
        RuntimeError,
        RuntimeError,
        "cannot finalize borrowed context",
        id="borrowed-finalize",
    ),
    pytest.param(
        lambda ctx, b: ctx.logical_data(np.ones((10, 10))[::-2, :]),
        ShapeError,
        ValueError,
        "is negative",
        id="negative-stride-buffer",
    ),
    pytest.param(
        lambda ctx, b: ctx.logical_data(_CAI(shape=(4,), strides=(0,))),
        ShapeError,
        ValueError,
        "zero",
        id="cai-broadcast",
    ),
    pytest.param(
        lambda ctx, b: ctx.logical_data(_CAI(shape=(2, 2), strides=(8,))),
        ShapeError,
        ValueError,
        "strides must match the number of dimensions",
        id="cai-strides-length",
    ),
    pytest.param(
        lambda ctx, b: ctx.logical_data(_CAI(shape=(-1,))),
        ShapeError,
        ValueError,
        "non-negative",
        id="cai-negative-extent",
    ),
    pytest.param(
        lambda ctx, b: ctx.logical_data(_CAI(stream=0)),
        ValueError,
        ValueError,
        "disallowed",
        id="cai-stream-0",
    ),
    pytest.param(
        lambda ctx, b: ctx.logical_data_empty(10),
        TypeError,
        TypeError,
        "shape must be an iterable of integers",
        id="empty-bare-int",
    ),
    pytest.param(
        lambda ctx, b: ctx.logical_data_empty(()),
        ValueError,
        ValueError,
        "shape must contain at least one dimension",
        id="empty-no-dimension",
    ),
    pytest.param(
        lambda ctx, b: ctx.logical_data_empty((0,)),
        ValueError,
        ValueError,
        "all shape dimensions must be positive integers",
        id="empty-zero",
    ),
    pytest.param(
        lambda ctx, b: stf.DeviceArray(-1, np.float32, stf.data_place.host()),
        ValueError,
        ValueError,
        "non-negative",
        id="DeviceArray(-1)",
    ),
    pytest.param(
        lambda ctx, b: stf.DeviceArray(
            2, np.dtype([("x", np.float32), ("y", np.float32)]), stf.data_place.host()
        ).__dlpack__(),
        BufferError,
        BufferError,
        "structured",
        id="dlpack-structured",
    ),
    pytest.param(
        _stackable_leaves(lambda a, b: stf.cond(a, "!=", 0.5)),
        ValueError,
        ValueError,
        "comparison operator",
        id="cond-op",
    ),
    pytest.param(
        _stackable_leaves(lambda a, b: stf.cond(1.0, ">", 0.5)),
        TypeError,
        TypeError,
        "stackable logical_data",
        id="cond-not-data",
    ),
    pytest.param(
        _stackable_leaves(lambda a, b: stf.cond(a, ">", np.zeros(4))),
        TypeError,
        TypeError,
        "real scalar",
        id="cond-threshold",
    ),
    pytest.param(
        _stackable_leaves(lambda a, b: a > b),
        TypeError,
        TypeError,
        "comparing two logical data",
        id="compare-two-data",
    ),
    pytest.param(
        _stackable_leaves(lambda a, b: a > "0.5"),
        TypeError,
        TypeError,
        "real scalar",
        id="compare-str",
    ),
    pytest.param(
        _stackable_leaves(lambda a, b: bool(a > 0.5)),
        TypeError,
        TypeError,
        "truth value",
        id="cond-bool",
    ),
    pytest.param(
        _stackable_leaves(lambda a, b: ((a > 0.5) & (b < 1.0)) | (a < 0.1)),
        NotImplementedError,
        NotImplementedError,
        "mixed",
        id="cond-mixed",
    ),
    pytest.param(
        _stackable_leaves(_nine_terms),
        ValueError,
        ValueError,
        "at most 8",
        id="cond-nine-terms",
    ),
    pytest.param(
        lambda ctx, b: stf.stackable_context(backend=b).repeat(-1),
        NegativeCountError,
        OverflowError,
        "non-negative",
        id="repeat(-1)",
    ),
]


@pytest.mark.parametrize("site, stflow_class, builtin, phrase", REFERENCE_SITES)
def test_reference_raise_sites(backend, monkeypatch, site, stflow_class, builtin, phrase):
    make_default(monkeypatch, backend)
    with stf.context(backend=backend) as ctx:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)  # repeat(-1)'s context
            with pytest.raises(builtin, match=phrase) as info:
                site(ctx, backend)
        assert isinstance(info.value, stflow_class)
        if stflow_class.__module__ == "stflow._core.errors":
            assert isinstance(info.value, STFError)
        gc.collect()


def test_reference_raise_site_of_the_numba_launcher(backend):
    numba_interop = pytest.importorskip("stflow.interop.numba")
    try:
        kernel = numba_interop.jit(lambda x: None)
    except stf.errors.BackendUnavailableError as exc:  # pragma: no cover
        pytest.skip(str(exc))
    with pytest.raises(TypeError, match="No STF context could be inferred"):
        kernel[1, 1](1.0)


def test_classes_of_the_reference_builtins():
    assert issubclass(DeviceOrdinalError, PlaceError)
    assert issubclass(DeviceOrdinalError, (ValueError, RuntimeError))
    assert issubclass(PlaceAllocationError, PlaceError)
    assert issubclass(PlaceAllocationError, MemoryError)
    assert issubclass(NegativeIndexError, IndexError)
    assert issubclass(NegativeIndexError, OverflowError)
    assert issubclass(NegativeCountError, ValueError)
    assert issubclass(NegativeCountError, OverflowError)
    assert issubclass(TokenArgumentError, TypeError)
    assert issubclass(TokenArgumentError, RuntimeError)
    assert issubclass(stf.errors.GridIndexError, IndexError)
    assert issubclass(stf.errors.GridIndexError, RuntimeError)
    assert issubclass(stf.errors.GreenContextUnavailableError, ImportError)
    assert issubclass(stf.errors.GreenContextUnavailableError, RuntimeError)
    assert issubclass(UnfinalizedContextWarning, UserWarning)


# -- deferred errors (I-7) ------------------------------------------------------------


def _raiser(error):
    def fn(*arrays):
        raise error

    return fn


def _three_failures(ctx):
    ld = ctx.logical_data(np.zeros(2), name="x")
    ctx.host_launch(ld.rw(), fn=_raiser(KeyError("first")), symbol="one")
    ctx.host_launch(ld.rw(), fn=_raiser(ValueError("second")), symbol="two")
    ctx.host_launch(ld.rw(), fn=_raiser(ZeroDivisionError("third")), symbol="three")
    return ld


def _notes(exc):
    return getattr(exc, "__notes__", [])


def test_deferred_errors_are_raised_one_per_call_oldest_first(backend):
    with stf.context(backend=backend) as ctx:
        ld = _three_failures(ctx)
        with pytest.raises(KeyError, match="first") as first:
            ctx.wait(ld)  # except KeyError works as in the reference
        assert not hasattr(first.value, "exceptions")  # never an ExceptionGroup
        assert "raised by host_launch 'one'" in _notes(first.value)
        assert any(
            "2 more pending" in note and "check_errors()" in note
            for note in _notes(first.value)
        )
        pending = ctx.pending_errors()
        assert [type(e) for e in pending] == [ValueError, ZeroDivisionError]
        assert [type(e) for e in ctx.pending_errors()] == [ValueError, ZeroDivisionError]
        try:
            ctx.check_errors()
        except ValueError as exc:  # the reference's except clause
            assert any("1 more pending" in note for note in _notes(exc))
        else:
            pytest.fail("check_errors() raised nothing")
        with pytest.raises(ZeroDivisionError) as last:
            ctx.check_errors()
        assert any("none more pending" in note for note in _notes(last.value))
        ctx.check_errors()  # nothing left: no-op
        assert ctx.pending_errors() == []
        np.testing.assert_array_equal(ctx.wait(ld), np.zeros(2))  # still usable


def test_error_log_raises_in_submission_order_not_capture_order():
    from stflow._core.errors import ErrorLog

    log = ErrorLog()
    log.capture(KeyError("submitted late"), order=5)  # captured first
    log.capture(ValueError("submitted early"), order=2)
    assert [type(e) for e in log.pending()] == [ValueError, KeyError]
    assert len(log) == 2  # pending() does not clear
    with pytest.raises(ValueError) as info:
        log.raise_pending("wait()")
    assert info.value.__notes__[-1].startswith(
        "stflow: asynchronous error raised at wait(); 1 more pending"
    )
    with pytest.raises(KeyError):
        log.raise_pending("check_errors()")
    log.raise_pending("check_errors()")  # empty: nothing raised
    assert not log


def test_fence_never_raises_deferred_errors(backend):
    with stf.context(backend=backend) as ctx:
        _three_failures(ctx)
        for _ in range(3):
            assert isinstance(ctx.fence(), int)
        _wait_until(lambda: len(ctx.pending_errors()) == 3)
        assert isinstance(ctx.fence(), int)
        with pytest.raises(KeyError):
            ctx.finalize()  # the oldest; the others stay pending
    assert [type(e) for e in ctx.pending_errors()] == [ValueError, ZeroDivisionError]
    with pytest.raises(ValueError):
        ctx.check_errors()  # works after finalize()
    with pytest.raises(ZeroDivisionError):
        ctx.check_errors()


def _wait_until(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail("condition not reached in time")
        time.sleep(0.002)


def test_with_block_exit_raises_the_oldest_deferred_error(backend):
    with pytest.raises(KeyError, match="first"):
        with stf.context(backend=backend) as ctx:
            _three_failures(ctx)
    with pytest.raises(ValueError):
        ctx.check_errors()
    with pytest.raises(ZeroDivisionError):
        ctx.check_errors()


def test_borrowed_context_reports_into_the_owners_queue(backend):
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(np.zeros(2), name="x")
        borrowed = ld.borrow_ctx_handle()
        borrowed.host_launch(ld.rw(), fn=_raiser(KeyError("from borrowed")))
        with pytest.raises(KeyError, match="from borrowed"):
            ctx.wait(ld)  # the owner sees it
        borrowed.host_launch(ld.rw(), fn=_raiser(ValueError("again")))
        _wait_until(lambda: len(ctx.pending_errors()) == 1)
        assert borrowed.pending_errors() == ctx.pending_errors()
        with pytest.raises(ValueError, match="again"):
            borrowed.check_errors()  # one queue, whoever asks
        assert ctx.pending_errors() == []


def test_caller_stream_finalize_raises_what_was_captured_so_far(backend):
    _emulated_only(backend)
    release = threading.Event()
    with stf.context(backend=backend) as outer:
        x = outer.logical_data(np.zeros(2), name="x")
        with outer.task(x.rw()) as t:
            inner = stf.context(stream=t.stream_ptr(), backend=backend)
            inner.host_launch(fn=_raiser(KeyError("early")))
            _wait_until(lambda: len(inner.pending_errors()) == 1)
            stflow.emulated.launch(t.stream_ptr(), release.wait, 10.0)
            inner.host_launch(fn=_raiser(ValueError("late")))
            with pytest.raises(KeyError, match="early"):
                inner.finalize()  # does not block: "late" has not run
            assert inner.pending_errors() == []
            release.set()
        outer.wait(x)  # the stream has run the callbacks now
        with pytest.raises(ValueError, match="late"):
            inner.check_errors()


def test_stackable_context_delegates_the_error_model(backend):
    with stf.stackable_context(backend=backend) as sctx:
        ld = sctx.logical_data(np.zeros(2), name="x")
        sctx.host_launch(ld.rw(), fn=_raiser(KeyError("one")))
        sctx.host_launch(ld.rw(), fn=_raiser(ValueError("two")))
        assert isinstance(sctx.fence(), int)  # never raises them
        _wait_until(lambda: len(sctx.pending_errors()) == 2)
        with pytest.raises(KeyError):
            sctx.check_errors()
        assert [type(e) for e in sctx.pending_errors()] == [ValueError]
        with pytest.raises(ValueError):
            sctx.check_errors()


# -- contexts ended without finalize() (I-6) ---------------------------------------------


def _abandoned(backend, data, fail=False):
    """Create a context that modifies ``data`` (and fails a callback), then drop it."""
    ctx = stf.context(backend=backend)
    ld = ctx.logical_data(data, name="user")
    with ctx.task(stf.exec_place.device(0), ld.rw()) as t:
        fill_with(t, 0, 7.0)  # the device instance: written back at finalize
    del t
    if fail:
        ctx.host_launch(fn=_raiser(KeyError("nobody catches this")))
    return ctx, ld


@pytest.mark.device_memory
def test_collected_context_never_writes_the_users_array(backend):
    user = np.zeros(4)
    warm = stf.context(backend=backend)  # what the first context loads stays loaded
    with warm.task(stf.exec_place.device(0), warm.logical_data(np.zeros(4)).rw()) as t:
        fill_with(t, 0, 7.0)
    del t
    warm.finalize()
    before = device_bytes_in_use(backend)
    ctx, ld = _abandoned(backend, user)
    with (
        pytest.warns(ResourceWarning, match="without an explicit finalize"),
        pytest.warns(UnfinalizedContextWarning, match="'user' were NOT written"),
    ):
        del ctx
        gc.collect()
    np.testing.assert_array_equal(user, np.zeros(4))
    assert device_bytes_in_use(backend) <= before  # memory freed
    with pytest.raises(ContextFinalizedError):
        ld.read()
    del ld
    gc.collect()  # dropping the data is safe


def test_collected_context_turns_errors_into_runtime_warnings(backend):
    user = np.zeros(4)
    ctx, ld = _abandoned(backend, user, fail=True)
    with (
        pytest.warns(RuntimeWarning, match="nobody catches this"),
        pytest.warns(ResourceWarning),
        pytest.warns(UnfinalizedContextWarning),
    ):
        del ctx, ld
        gc.collect()
    np.testing.assert_array_equal(user, np.zeros(4))


def test_collected_context_without_lost_results_only_warns_resource(backend):
    source = np.arange(3.0)
    ctx = stf.context(backend=backend)
    ld = ctx.logical_data(source)
    with ctx.task(ld.read()):
        pass
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del ctx, ld
        gc.collect()
    categories = {w.category for w in caught}
    assert ResourceWarning in categories
    assert UnfinalizedContextWarning not in categories


def test_collected_stackable_context_with_an_open_scope(backend):
    user = np.zeros(2)
    sctx = stf.stackable_context(backend=backend)
    ld = sctx.logical_data(user, name="user")
    sctx.push()
    with sctx.task(ld.rw()):
        pass
    with (
        pytest.warns(ResourceWarning, match="stackable_context collected.*1 open"),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore", UnfinalizedContextWarning)
        del sctx, ld
        gc.collect()
    np.testing.assert_array_equal(user, np.zeros(2))


def test_collected_context_with_a_started_task_is_released_later(backend):
    user = np.zeros(2)
    ctx = stf.context(backend=backend)
    ld = ctx.logical_data(user, name="user")
    t = ctx.task(ld.rw())
    t.start()
    with pytest.warns(ResourceWarning), warnings.catch_warnings():
        warnings.simplefilter("ignore", UnfinalizedContextWarning)
        del ctx
        gc.collect()  # does not block on the started task
    t.end()  # the helper thread releases everything now
    runtime = t._runtime
    _wait_until(lambda: runtime.finalized)
    np.testing.assert_array_equal(user, np.zeros(2))


_AT_EXIT = """
import atexit
import numpy as np
user = np.zeros(4)
atexit.register(lambda: print("user after exit:", user.tolist()))   # runs last
import stflow as stf
ctx = stf.context(backend="emulated")
ld = ctx.logical_data(user, name="user")
with ctx.task(stf.exec_place.device(0), ld.rw()) as t:
    np.asarray(t.get_arg_cai(0))[:] = 5.0
"""


def test_context_alive_at_exit_is_abandoned_with_a_visible_warning():
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_AT_EXIT)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "user after exit: [0.0, 0.0, 0.0, 0.0]" in result.stdout
    # A UserWarning: shown with the default warning filters, once for the context.
    assert result.stderr.count("UnfinalizedContextWarning") == 1, result.stderr
    assert "'user' were NOT written back" in result.stderr
    assert "alive at interpreter exit" in result.stderr


# -- task views and the read-only check (I-34) ----------------------------------------


def test_cuda_task_views_advertise_writable_memory_for_every_mode():
    view = TaskView(0x1000, (2, 3), np.float32, 0, readonly=True)
    assert view.__cuda_array_interface__["data"] == (0x1000, False)
    assert view["data"][1] is False and not view.readonly
    assert view.read_only_access
    plain = stf.stf_cai(0x1000, (2,), np.float32, readonly=True)
    assert plain["data"] == (0x1000, True)  # stf_cai keeps its keyword


def test_torch_accepts_the_view_of_a_read_dependency(backend):
    torch = pytest.importorskip("torch")
    if backend != "cuda":
        pytest.skip("a CUDA Array Interface view needs the CUDA backend")
    source = np.arange(4.0)
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(source)
        with ctx.task(x.read()) as t:
            view = t.get_arg_cai(0)
            assert view["data"][1] is False
            tensor = torch.as_tensor(view, device="cuda")
            assert tensor.shape == (4,)


def test_emulated_read_views_stay_read_only(backend):
    _emulated_only(backend)
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(np.arange(3.0))
        with ctx.task(x.read()) as t:
            view = t.get_arg_cai(0)
            assert view["data"][1] is True
            with pytest.raises(ValueError, match="read-only"):
                np.asarray(view)[0] = 1.0


def test_write_through_the_pointer_of_a_read_dependency_is_detected(backend):
    _emulated_only(backend)
    source = np.arange(3.0)
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(source, name="x")
        y = ctx.logical_data(np.zeros(3), name="y")
        with pytest.raises(
            AccessModeError,
            match=r"task 'sneaky' declared read\(\) on "
            r"logical data 'x'",
        ):
            with ctx.task(x.read(), y.rw(), symbol="sneaky") as t:
                ctypes.c_double.from_address(t.get_arg(0)).value = 42.0
        with ctx.task(x.rw(), symbol="honest") as t:  # ended: the context is usable
            np.asarray(t.get_arg_cai(0))[1] = 9.0
        assert ctx.wait(x).tolist()[1] == 9.0


def test_write_by_launched_work_of_a_read_dependency_is_deferred(backend):
    _emulated_only(backend)
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(np.arange(3.0), name="x")

        go = threading.Event()

        def poke(ptr):
            go.wait(10.0)  # still queued at end()
            ctypes.c_double.from_address(ptr).value = -1.0

        with ctx.task(x.read(), symbol="launcher") as t:
            stflow.emulated.launch(t.stream_ptr(), poke, t.get_arg(0))
        go.set()  # end() enqueued the check
        with pytest.raises(AccessModeError, match="task 'launcher' declared read"):
            ctx.wait(x)


def test_honest_tasks_are_never_flagged(backend):
    _emulated_only(backend)
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(np.arange(64.0), name="x")
        y = ctx.logical_data(np.zeros(64), name="y")
        for _ in range(20):
            with ctx.task(x.read(), y.rw()) as t:
                a, b = t.args_cai()
                np.asarray(b)[:] += np.asarray(a)
            with ctx.task(x.read(), x.read(stf.data_place.host())) as t:
                pass
            ctx.host_launch(x.read(), y.read(), fn=lambda a, b: None)
        assert ctx.wait(y).tolist() == (20 * np.arange(64.0)).tolist()
        assert ctx.pending_errors() == []
