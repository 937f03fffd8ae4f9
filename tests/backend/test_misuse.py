"""The misuse catalogue: bad inputs to the Tier-1 API.

Every case asserts two things: the exception type (a class of ``stflow.errors``, or
the builtin the API names for it) and a fragment of the message that names the object
concerned or the remedy (API section 1.1: "Messages name the object concerned and the
remedy"). No case may hang: the module runs under a short per-test timeout, and the
cases that would block on a conflicting started task expect ``ScopeError`` instead.

The cases are grouped in families (registration, read-only data, shapes and fills,
contexts, places, task building, task lifecycle, host callbacks, deferred errors,
views, waits, configuration). For each family one test runs all of its cases against
one context and then checks that the context still computes correctly.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any

import numpy as np
import pytest

import stflow as stf
import stflow._core.config
import stflow._places.locality
import stflow.emulated
from stflow.errors import (
    AccessModeError,
    BackendUnavailableError,
    ContextFinalizedError,
    ContextMismatchError,
    PlaceError,
    ScopeError,
    ShapeError,
    STFError,
)
from stflow.fill_utils import init_logical_data

pytestmark = pytest.mark.timeout(30)

CALLBACK_TIMEOUT = 10.0
"""Seconds to wait for a host callback that the test needs to have run."""


# -- helpers ------------------------------------------------------------------------


def _require_emulated(backend: str) -> None:
    if backend != "emulated":
        pytest.skip("uses NumPy views of task data, which only the emulated backend has")


def _add_one(array: np.ndarray) -> None:
    np.add(array, 1, out=array)


def _assert_usable(ctx: stf.context, backend: str) -> None:
    """A correct task and a correct host callback still give the right result."""
    data = ctx.logical_data(np.arange(4.0), name="afterwards")
    with ctx.task(data.rw(), symbol="double") as t:
        if backend == "emulated":
            view = np.asarray(t.get_arg_cai(0))
            view *= 2
    ctx.host_launch(data.rw(), fn=_add_one, symbol="add-one")
    factor = 2.0 if backend == "emulated" else 1.0
    np.testing.assert_array_equal(ctx.wait(data), np.arange(4.0) * factor + 1)
    ctx.check_errors()  # nothing left pending by the misuse


def _data(ctx: stf.context, name: str = "x") -> stf.logical_data:
    return ctx.logical_data(np.arange(3.0), name=name)


def _readonly_array() -> np.ndarray:
    array = np.arange(3.0)
    array.flags.writeable = False
    return array


class _FakeCudaArray:
    """An object exporting only a CUDA Array Interface dictionary."""

    def __init__(self, **fields: Any) -> None:
        interface = {
            "version": 3,
            "shape": (4,),
            "typestr": "<f8",
            "data": (0x1000, False),
            "strides": None,
            "stream": None,
        }
        interface.update(fields)
        self.__cuda_array_interface__ = interface


class _BadCudaStream:
    def __cuda_stream__(self) -> tuple[int, str]:
        return (0, "not a handle")


def _run_family(ctx: stf.context, cases: list) -> None:
    """Run every case of a family against ``ctx``, each with its own expectations."""
    for case in cases:
        function, error, pattern = case.values
        with pytest.raises(error, match=pattern):
            function(ctx)


# -- registration of user buffers ----------------------------------------------------

REGISTRATION = [
    pytest.param(
        lambda ctx: ctx.logical_data(np.arange(10.0)[::-2]),
        ShapeError,
        r"stride -16 of axis 0 .* is negative.*ascontiguousarray",
        id="negative-step-slice",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data(np.broadcast_to(np.ones(3), (4, 3))),
        ShapeError,
        r"stride 0 of axis 0 .* is zero \(a broadcast dimension\)",
        id="broadcast",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data(
            np.lib.stride_tricks.as_strided(np.zeros(16), shape=(3, 4), strides=(16, 8))
        ),
        ShapeError,
        r"elements that share bytes.*ascontiguousarray",
        id="overlapping-rows",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data(np.array([1, "a"], dtype=object)),
        TypeError,
        r"dtype object has no fixed-size byte layout.*numeric",
        id="object-array",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data(None),
        TypeError,
        r"logical_data\(None\).*logical_data_empty",
        id="none",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data([1.0, 2.0]),
        TypeError,
        r"cannot register a list.*numpy\.asarray",
        id="list",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data({"a": 1}),
        TypeError,
        r"cannot register a dict.*buffer protocol",
        id="dict",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data("text"),
        TypeError,
        r"cannot register a str",
        id="str",
    ),
    pytest.param(
        lambda ctx: stf.logical_data(ctx, np.ones(4), shape=(2, 2)),
        ShapeError,
        r"shape=\(2, 2\) does not match the buffer's shape \(4,\)",
        id="class-shape-mismatch",
    ),
    pytest.param(
        lambda ctx: stf.logical_data(ctx, np.ones(4), dtype=np.float32),
        ShapeError,
        r"dtype=float32 does not match the buffer's dtype float64",
        id="class-dtype-mismatch",
    ),
    pytest.param(
        lambda ctx: stf.logical_data(ctx, np.ones(4), shape=4),
        TypeError,
        r"shape must be an iterable of integers.*got 4",
        id="class-shape-bare-int",
    ),
    pytest.param(
        lambda ctx: stf.logical_data("ctx", np.ones(4)),
        TypeError,
        r"logical_data expects a context first, got str",
        id="class-not-a-context",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data(np.ones(3), dplace=stf.data_place.device(0)),
        PlaceError,
        r"contradicts the buffer, which lives in the host; omit "
        r"dplace",
        id="dplace-contradicts-host-buffer",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data(np.ones(3), dplace=stf.data_place.managed()),
        PlaceError,
        r"data_place\('managed'\) contradicts the buffer",
        id="dplace-managed-for-host-buffer",
    ),
    pytest.param(
        lambda ctx: stf.logical_data(ctx, np.ones(4), dtype="junk"),
        TypeError,
        r"'junk'",
        id="class-dtype-junk",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data(np.ones(3), dplace=stf.data_place.affine()),
        PlaceError,
        r"data_place\('affine'\) cannot hold a user buffer",
        id="dplace-affine",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data(np.ones(3), dplace="host"),
        TypeError,
        r"dplace must be a data_place or None, got str",
        id="dplace-not-a-place",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data(np.ones(3), name=3),
        TypeError,
        r"name must be a str or None, got int",
        id="name-int",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data(_FakeCudaArray(mask=object())),
        ShapeError,
        r"masked.*'mask' field must be None",
        id="cai-mask",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data(_FakeCudaArray(strides=(-8,))),
        ShapeError,
        r"CUDA Array Interface.*stride -8 of axis 0.*negative",
        id="cai-negative-stride",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data(_FakeCudaArray(stream=0)),
        ValueError,
        r"forbids stream 0",
        id="cai-stream-zero",
    ),
]


@pytest.mark.parametrize("case, error, pattern", REGISTRATION)
def test_registration(backend, case, error, pattern):
    with stf.context(backend=backend) as ctx:
        with pytest.raises(error, match=pattern):
            case(ctx)


def test_gpu_buffer_on_the_emulated_backend_names_the_extra(backend):
    _require_emulated(backend)
    with stf.context(backend=backend) as ctx:
        with pytest.raises(BackendUnavailableError, match=r"stflow\[cu12\]"):
            ctx.logical_data(_FakeCudaArray())


def test_resizing_a_registered_bytearray(backend):
    buffer = bytearray(8)
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(buffer, name="bytes")
        with pytest.raises(BufferError, match="re-sized"):
            buffer.append(1)
        ctx.host_launch(ld.rw(), fn=_add_one)
        _assert_usable(ctx, backend)
    assert buffer == bytearray([1] * 8)


def test_finalizing_a_borrowed_context(backend):
    with stf.context(backend=backend) as ctx:
        borrowed = _data(ctx).borrow_ctx_handle()
        with pytest.raises(
            RuntimeError,
            match=r"cannot finalize borrowed context: a borrowed context is not the owner; "
            r"finalize the context that owns",
        ):
            borrowed.finalize()
        _assert_usable(ctx, backend)


def test_context_usable_after_registration_errors(backend):
    with stf.context(backend=backend) as ctx:
        _run_family(ctx, REGISTRATION)
        _assert_usable(ctx, backend)


# -- writing read-only data ----------------------------------------------------------

READONLY_SOURCES = {
    "ndarray-not-writeable": _readonly_array,
    "bytes": lambda: b"\x01\x02\x03\x04",
}

WRITING_DEPS = {
    "ld.write()": lambda ld: ld.write(),
    "ld.rw()": lambda ld: ld.rw(),
    "stf.write(ld)": lambda ld: stf.write(ld),
    "stf.rw(ld)": lambda ld: stf.rw(ld),
    "dep(ld, RW)": lambda ld: stf.dep(ld, stf.AccessMode.RW),
    "ld.write(host)": lambda ld: ld.write(stf.data_place.host()),
}


@pytest.mark.parametrize("source", READONLY_SOURCES)
@pytest.mark.parametrize("make_dep", WRITING_DEPS)
def test_writing_read_only_data(backend, source, make_dep):
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(READONLY_SOURCES[source](), name="frozen")
        assert ld.readonly
        with pytest.raises(
            AccessModeError,
            match=r"logical data 'frozen', which was registered from a "
            r"read-only buffer; use read\(\)",
        ):
            WRITING_DEPS[make_dep](ld)
        ld.read()  # reading stays allowed


def test_context_usable_after_read_only_errors(backend):
    source = _readonly_array()
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(source, name="frozen")
        for make_dep in WRITING_DEPS.values():
            with pytest.raises(AccessModeError, match="read-only"):
                make_dep(ld)
        seen = []
        ctx.host_launch(ld.read(), fn=lambda a: seen.append(a.copy()))
        np.testing.assert_array_equal(ctx.wait(ld), np.arange(3.0))
        _assert_usable(ctx, backend)
    np.testing.assert_array_equal(seen[0], np.arange(3.0))


# -- shapes, dtypes and fill values of created data ---------------------------------

FACTORIES = {
    "empty": lambda ctx, shape: ctx.logical_data_empty(shape),
    "full": lambda ctx, shape: ctx.logical_data_full(shape, 1.5),
    "zeros": lambda ctx, shape: ctx.logical_data_zeros(shape),
    "ones": lambda ctx, shape: ctx.logical_data_ones(shape, dtype=np.int32),
}

BAD_SHAPES = [
    pytest.param(
        10,
        TypeError,
        r"shape must be an iterable of integers such as \(10,\), got 10",
        id="bare-int",
    ),
    pytest.param((2.5,), TypeError, r"non-integer extent 2\.5", id="float-extent"),
    pytest.param(None, TypeError, r"shape must be an iterable of integers", id="none"),
    pytest.param("ab", TypeError, r"shape must be an iterable of integers", id="str"),
    pytest.param((True, 2), TypeError, r"non-integer extent True", id="bool-extent"),
    pytest.param(
        (), ValueError, r"shape must contain at least one dimension", id="empty-tuple"
    ),
    pytest.param(
        (0,),
        ValueError,
        r"all shape dimensions must be positive integers, got \(0,\)",
        id="zero-extent",
    ),
    pytest.param(
        (-1,),
        ValueError,
        r"all shape dimensions must be positive integers, got \(-1,\)",
        id="negative-extent",
    ),
    pytest.param(
        (4, -2),
        ValueError,
        r"all shape dimensions must be positive integers",
        id="negative-second-extent",
    ),
]


@pytest.mark.parametrize("factory", FACTORIES)
@pytest.mark.parametrize("shape, error, pattern", BAD_SHAPES)
def test_bad_shapes(backend, factory, shape, error, pattern):
    with stf.context(backend=backend) as ctx:
        with pytest.raises(error, match=pattern):
            FACTORIES[factory](ctx, shape)


FILLS_AND_DTYPES = [
    pytest.param(
        lambda ctx: ctx.logical_data_full((4,), 2.5, dtype=np.int32),
        ValueError,
        r"fill value 2\.5 cannot be stored as int32",
        id="float-into-int32",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data_full((4,), 300, dtype=np.uint8),
        ValueError,
        r"fill value 300 cannot be stored as uint8",
        id="overflow-uint8",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data_full((4,), "abc", dtype=np.float64),
        ValueError,
        r"fill value 'abc' cannot be stored as float64",
        id="str-into-float",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data_full((4,), 1 + 2j, dtype=np.float64),
        ValueError,
        r"cannot be stored as float64",
        id="complex-into-float",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data_full((4,), np.nan, dtype=np.int32),
        ValueError,
        r"fill value nan cannot be stored as int32",
        id="nan-into-int32",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data_empty((4,), dtype=object),
        TypeError,
        r"dtype object has no fixed-size byte layout",
        id="empty-object-dtype",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data_empty((4,), dtype="not-a-dtype"),
        TypeError,
        r"'not-a-dtype' is not a NumPy dtype",
        id="empty-junk-dtype",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data_empty((4,), name=7),
        TypeError,
        r"name must be a str or None, got int",
        id="empty-name-int",
    ),
    pytest.param(
        lambda ctx: init_logical_data(ctx, ctx.token(), 1.0),
        TypeError,
        r"expects a logical data with memory",
        id="init-token",
    ),
    pytest.param(
        lambda ctx: init_logical_data(
            ctx, ctx.logical_data_empty((2,)), 1.0, data_place="host"
        ),
        TypeError,
        r"data_place must be a data_place or None, got str",
        id="init-bad-data-place",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data_full((2,), 1.0, where="host"),
        TypeError,
        r"must be a data_place or None, got str",
        id="full-bad-where",
    ),
    pytest.param(
        lambda ctx: ctx.logical_data_full((2,), 1.0, exec_place="host"),
        TypeError,
        r"exec_place must be an exec_place or None, got str",
        id="full-bad-exec-place",
    ),
]


@pytest.mark.parametrize("case, error, pattern", FILLS_AND_DTYPES)
def test_fills_and_dtypes(backend, case, error, pattern):
    with stf.context(backend=backend) as ctx:
        with pytest.raises(error, match=pattern):
            case(ctx)


def test_context_usable_after_shape_and_fill_errors(backend):
    with stf.context(backend=backend) as ctx:
        for factory in FACTORIES.values():
            for case in BAD_SHAPES:
                shape, error, pattern = case.values
                with pytest.raises(error, match=pattern):
                    factory(ctx, shape)
        _run_family(ctx, FILLS_AND_DTYPES)
        full = ctx.logical_data_full((4,), 2, dtype=np.int32)
        np.testing.assert_array_equal(ctx.wait(full), np.full(4, 2, np.int32))
        _assert_usable(ctx, backend)


# -- data of another context, or of a finalized one ----------------------------------

MISMATCH = {
    "task": lambda ctx, other: ctx.task(other.read()),
    "add_dep": lambda ctx, other: ctx.task().add_dep(other.rw()),
    "host_launch": lambda ctx, other: ctx.host_launch(other.read(), fn=print),
    "wait": lambda ctx, other: ctx.wait(other),
    "init_logical_data": lambda ctx, other: init_logical_data(ctx, other, 1.0),
}


@pytest.mark.parametrize("use", MISMATCH)
def test_data_of_another_context(backend, use):
    with stf.context(backend=backend) as ctx, stf.context(backend=backend) as owner:
        other = owner.logical_data(np.ones(3), name="foreign")
        with pytest.raises(
            ContextMismatchError, match=r"'foreign' belongs to a different context"
        ):
            MISMATCH[use](ctx, other)


STALE_DATA = {
    "task": lambda ctx, stale: ctx.task(stale.read()),
    "host_launch": lambda ctx, stale: ctx.host_launch(stale.read(), fn=print),
    "wait": lambda ctx, stale: ctx.wait(stale),
    "read()": lambda ctx, stale: stale.read(),
    "stf.rw()": lambda ctx, stale: stf.rw(stale),
    "set_symbol": lambda ctx, stale: stale.set_symbol("renamed"),
    "empty_like": lambda ctx, stale: stale.empty_like(),
    "borrow_ctx_handle": lambda ctx, stale: stale.borrow_ctx_handle(),
}


@pytest.mark.parametrize("use", STALE_DATA)
def test_data_of_a_finalized_context(backend, use):
    with stf.context(backend=backend) as old:
        stale = old.logical_data(np.ones(3), name="stale")
    with stf.context(backend=backend) as ctx:
        with pytest.raises(
            ContextFinalizedError, match=r"'stale' belongs to a finalized context"
        ):
            STALE_DATA[use](ctx, stale)


def test_context_usable_after_context_errors(backend):
    with stf.context(backend=backend) as ctx:
        with stf.context(backend=backend) as owner:
            other = owner.logical_data(np.ones(3), name="foreign")
            for use in MISMATCH.values():
                with pytest.raises(ContextMismatchError, match="different context"):
                    use(ctx, other)
            _assert_usable(owner, backend)
        for use in STALE_DATA.values():
            with pytest.raises(ContextFinalizedError, match="finalized context"):
                use(ctx, other)
        _assert_usable(ctx, backend)


# -- use of a finalized context -------------------------------------------------------

AFTER_FINALIZE = {
    "task": lambda ctx, ld: ctx.task(),
    "task-class": lambda ctx, ld: stf.task(ctx),
    "host_launch": lambda ctx, ld: ctx.host_launch(fn=print),
    "logical_data": lambda ctx, ld: ctx.logical_data(np.ones(2)),
    "logical_data-class": lambda ctx, ld: stf.logical_data(ctx, np.ones(2)),
    "logical_data_empty": lambda ctx, ld: ctx.logical_data_empty((2,)),
    "logical_data_full": lambda ctx, ld: ctx.logical_data_full((2,), 1.0),
    "logical_data_zeros": lambda ctx, ld: ctx.logical_data_zeros((2,)),
    "logical_data_ones": lambda ctx, ld: ctx.logical_data_ones((2,)),
    "token": lambda ctx, ld: ctx.token(),
    "fence": lambda ctx, ld: ctx.fence(),
    "wait": lambda ctx, ld: ctx.wait(ld),
    "ld.rw()": lambda ctx, ld: ld.rw(),
    "ld.empty_like()": lambda ctx, ld: ld.empty_like(),
}


@pytest.mark.parametrize("use", AFTER_FINALIZE)
def test_use_after_finalize(backend, use):
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(np.ones(2), name="late")
        ctx.finalize()
        with pytest.raises(ContextFinalizedError, match=r"finalized.*(create|live)"):
            AFTER_FINALIZE[use](ctx, ld)


def test_task_built_before_finalize_cannot_start(backend):
    with stf.context(backend=backend) as ctx:
        t = ctx.task(ctx.logical_data(np.ones(2)).read(), symbol="late")
        ctx.finalize()
        with pytest.raises(
            ContextFinalizedError, match=r"task 'late'\.start\(\).*finalized"
        ):
            t.start()


def test_finalize_is_idempotent_and_check_errors_still_works(backend):
    ctx = stf.context(backend=backend)
    data = np.zeros(3)
    ld = ctx.logical_data(data)
    ctx.host_launch(ld.rw(), fn=_add_one)
    ctx.finalize()
    ctx.finalize()
    ctx.check_errors()
    with ctx:
        pass  # __exit__ finalizes again: no-op
    np.testing.assert_array_equal(data, np.ones(3))


# -- places -------------------------------------------------------------------------

PLACES = [
    pytest.param(
        lambda: stf.exec_place.device(-1),
        PlaceError,
        r"invalid device id -1",
        id="exec-device-negative",
    ),
    pytest.param(
        lambda: stf.exec_place.device(1.0),
        TypeError,
        r"device ordinal must be an int, got float",
        id="exec-device-float",
    ),
    pytest.param(
        lambda: stf.data_place.device(-1),
        PlaceError,
        r"data_place\.device: invalid device id -1: device ordinals are 0 "
        r"or more",
        id="data-device-negative",
    ),
    pytest.param(
        lambda: stf.data_place.device("0"),
        TypeError,
        r"device ordinal must be an int, got str",
        id="data-device-str",
    ),
    pytest.param(
        lambda: stf.data_place.device(True),
        TypeError,
        r"device ordinal must be an int, got bool",
        id="data-device-bool",
    ),
    pytest.param(
        lambda: stf.data_place.device(None),
        TypeError,
        r"device ordinal must be an int, got NoneType",
        id="data-device-none",
    ),
    pytest.param(
        lambda: stf.exec_place(),
        TypeError,
        r"exec_place cannot be constructed directly; use exec_place\.host\(\)",
        id="exec_place()",
    ),
    pytest.param(
        lambda: stf.data_place(),
        TypeError,
        r"data_place cannot be constructed directly; use data_place\.host\(\)",
        id="data_place()",
    ),
    pytest.param(
        lambda: stf.logical_data(),
        TypeError,
        r"logical_data cannot be built without a context; use "
        r"ctx\.logical_data\(buf\)",
        id="logical_data()",
    ),
    pytest.param(
        lambda: stf.task(),
        TypeError,
        r"task cannot be built without a context; use ctx\.task",
        id="task()",
    ),
    pytest.param(
        lambda: stf.task("ctx"),
        TypeError,
        r"task expects a context first, got str",
        id="task-not-a-context",
    ),
    pytest.param(
        lambda: stf.data_place.affine().allocate(8),
        PlaceError,
        r"data_place\('affine'\) cannot allocate memory; use a host",
        id="affine-allocate",
    ),
    pytest.param(
        lambda: stf.data_place.host().allocate(-1),
        ValueError,
        r"nbytes must be non-negative, got -1",
        id="allocate-negative",
    ),
    pytest.param(
        lambda: stf.data_place.host().allocate("8"),
        TypeError,
        r"nbytes must be an int, got str",
        id="allocate-str",
    ),
    pytest.param(
        lambda: stf.data_place.host().deallocate(0x1234, 8),
        ValueError,
        r"0x1234 was not allocated by data_place\.allocate",
        id="deallocate-unknown",
    ),
    pytest.param(
        lambda: stf.exec_place.host().get_place(1),
        IndexError,
        r"index 1 out of range",
        id="get_place-1",
    ),
    pytest.param(
        lambda: stf.exec_place.host()[-1],
        IndexError,
        r"negative index -1",
        id="get_place-negative",
    ),
    pytest.param(
        lambda: stf.exec_place.host().set_affine_data_place("host"),
        TypeError,
        r"set_affine_data_place expects a data_place, got str",
        id="set_affine-str",
    ),
    pytest.param(
        lambda: stf.exec_place.host().set_affine_data_place(stf.data_place.affine()),
        PlaceError,
        r"cannot itself be data_place\.affine\(\)",
        id="set_affine-affine",
    ),
]


@pytest.mark.parametrize("case, error, pattern", PLACES)
def test_places(backend, case, error, pattern):
    with pytest.raises(error, match=pattern):
        case()


def test_device_factories_check_the_ordinal_at_once():
    # I-8: against the default backend, with the reference's RuntimeError too.
    for factory in (stf.exec_place.device, stf.data_place.device):
        with pytest.raises(PlaceError, match="invalid device id 99") as caught:
            factory(99)
        assert isinstance(caught.value, RuntimeError)


def test_places_are_checked_against_the_context_using_them(backend, monkeypatch):
    # A place valid on the default backend may not exist on the context's backend:
    # the context that uses it says so.
    monkeypatch.setattr(
        stflow._places.locality, "_known_count", (stflow._core.config.config(), 100)
    )
    exec_place = stf.exec_place.device(99)
    data_place = stf.data_place.device(99)
    assert exec_place.device_id == 99 and data_place.device_id == 99
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(np.zeros(4))
        with pytest.raises(
            PlaceError,
            match=rf"task #\d+: invalid device id 99: device 99 does not exist on "
            rf"the {backend} backend \(\d+ device",
        ):
            with ctx.task(exec_place, x.rw()):
                pass
        with pytest.raises(
            PlaceError,
            match=r"data_place\.device\(99\) does not exist "
            r"on this backend \(\d+ device",
        ):
            with ctx.task(x.rw(data_place)):
                pass
        with pytest.raises(PlaceError, match=r"device 99 does not exist"):
            ctx.logical_data_zeros((4,), exec_place=exec_place)
        _assert_usable(ctx, backend)


def test_context_usable_after_place_errors(backend):
    with stf.context(backend=backend) as ctx:
        for case in PLACES:
            function, error, pattern = case.values
            with pytest.raises(error, match=pattern):
                function()
        _assert_usable(ctx, backend)


# -- context construction -----------------------------------------------------------

CONTEXTS = [
    pytest.param(
        lambda: stf.context(backend="tpu"),
        ValueError,
        r"backend='tpu' is not one of auto, cuda, emulated",
        id="backend-tpu",
    ),
    pytest.param(
        lambda: stf.context(backend=3),
        TypeError,
        r"backend must be a str, got int",
        id="backend-int",
    ),
    pytest.param(
        lambda: stf.context(stream="abc"),
        TypeError,
        r"a stream must be None, an int handle or an object with "
        r"__cuda_stream__, got str",
        id="stream-str",
    ),
    pytest.param(
        lambda: stf.context(stream=1.5), TypeError, r"got float", id="stream-float"
    ),
    pytest.param(
        lambda: stf.context(stream=_BadCudaStream()),
        TypeError,
        r"__cuda_stream__\(\) returned .*expected \(0, <int handle>\)",
        id="stream-bad-protocol",
    ),
    pytest.param(
        lambda: stf.context(handle=object()),
        TypeError,
        r"handle must be .*got object",
        id="handle-object",
    ),
    pytest.param(
        lambda: stf.context(borrowed=True),
        TypeError,
        r"borrow_ctx_handle",
        id="borrowed-true",
    ),
]


@pytest.mark.parametrize("case, error, pattern", CONTEXTS)
def test_context_construction(backend, case, error, pattern):
    with pytest.raises(error, match=pattern):
        case()


def test_unknown_emulated_stream_handle(backend):
    _require_emulated(backend)
    with pytest.raises(ValueError, match=r"not a stream of the emulated backend"):
        stf.context(stream=0x12345, backend=backend)


# -- building tasks and dependencies ------------------------------------------------

TASK_BUILDING = [
    pytest.param(
        lambda ctx: ctx.task(3),
        TypeError,
        r"positional arguments must be dependencies \(ld\.read\(\), \.\.\.\) "
        r"or one exec_place, got int",
        id="task-int",
    ),
    pytest.param(
        lambda ctx: ctx.task(np.ones(3)),
        TypeError,
        r"must be dependencies.*got ndarray",
        id="task-ndarray",
    ),
    pytest.param(
        lambda ctx: ctx.task(_data(ctx)),
        TypeError,
        r"must be dependencies \(ld\.read\(\).*got logical_data",
        id="task-bare-logical-data",
    ),
    pytest.param(
        lambda ctx: ctx.task(stf.exec_place.host(), stf.exec_place.device(0)),
        ValueError,
        r"two execution places given; pass one exec_place",
        id="task-two-exec-places",
    ),
    pytest.param(
        lambda ctx: ctx.task(symbol=3),
        TypeError,
        r"symbol must be a str, got int",
        id="task-symbol-int",
    ),
    pytest.param(
        lambda ctx: ctx.task().set_symbol(3),
        TypeError,
        r"symbol must be a str, got int",
        id="set_symbol-int",
    ),
    pytest.param(
        lambda ctx: _data(ctx).set_symbol(3),
        TypeError,
        r"set_symbol expects a str, got int",
        id="ld-set_symbol-int",
    ),
    pytest.param(
        lambda ctx: ctx.task().add_dep("x"),
        TypeError,
        r"add_dep\(\): expected a dependency such as ld\.read\(\)",
        id="add_dep-str",
    ),
    pytest.param(
        lambda ctx: ctx.task().set_exec_place("host"),
        TypeError,
        r"set_exec_place expects an exec_place, got str",
        id="set_exec_place-str",
    ),
    pytest.param(
        lambda ctx: stf.dep(_data(ctx), 7),
        AccessModeError,
        r"access mode 7 is not one of AccessMode\.READ, WRITE, RW or REDUCE",
        id="dep-mode-7",
    ),
    pytest.param(
        lambda ctx: stf.dep(_data(ctx), stf.AccessMode.NONE),
        AccessModeError,
        r"is not one of AccessMode\.READ",
        id="dep-mode-none",
    ),
    pytest.param(
        lambda ctx: stf.dep(_data(ctx), True),
        AccessModeError,
        r"access mode True",
        id="dep-mode-bool",
    ),
    pytest.param(
        lambda ctx: stf.dep(_data(ctx), "r"),
        AccessModeError,
        r"access mode 'r'",
        id="dep-mode-str",
    ),
    pytest.param(
        lambda ctx: stf.dep("x", 1),
        TypeError,
        r"dep expects a logical_data \(or token\), got str",
        id="dep-str",
    ),
    pytest.param(
        lambda ctx: stf.dep(None, 1),
        TypeError,
        r"dep expects a logical_data.*got NoneType",
        id="dep-none",
    ),
    pytest.param(
        lambda ctx: stf.read(np.ones(3)),
        TypeError,
        r"dep expects a logical_data.*got ndarray",
        id="read-ndarray",
    ),
    pytest.param(
        lambda ctx: stf.dep(_data(ctx), 1, "host"),
        TypeError,
        r"data place of a dependency must be a data_place or None, got str",
        id="dep-dplace-str",
    ),
    pytest.param(
        lambda ctx: _data(ctx).read(stf.exec_place.host()),
        TypeError,
        r"must be a data_place or None, got exec_place",
        id="read-dplace-exec-place",
    ),
    pytest.param(
        lambda ctx: ctx.task(stf.exec_place.host()).set_exec_place(stf.data_place.host()),
        TypeError,
        r"expects an exec_place, got data_place",
        id="set_exec_place-data-place",
    ),
]


@pytest.mark.parametrize("case, error, pattern", TASK_BUILDING)
def test_task_building(backend, case, error, pattern):
    with stf.context(backend=backend) as ctx:
        with pytest.raises(error, match=pattern):
            case(ctx)


def test_writing_one_data_at_two_places(backend):
    with stf.context(backend=backend) as ctx:
        x = _data(ctx)
        t = ctx.task(
            x.rw(stf.data_place.device(0)), x.read(stf.data_place.host()), symbol="split"
        )
        with pytest.raises(
            AccessModeError,
            match=r"task 'split' accesses logical data 'x' at two places "
            r"and writes it; use one place",
        ):
            t.start()
        _assert_usable(ctx, backend)


def test_context_usable_after_task_building_errors(backend):
    with stf.context(backend=backend) as ctx:
        _run_family(ctx, TASK_BUILDING)
        _assert_usable(ctx, backend)


# -- the task lifecycle ---------------------------------------------------------------

WINDOW_CALLS = {
    "get_arg": lambda t: t.get_arg(0),
    "get_arg_cai": lambda t: t.get_arg_cai(0),
    "args_cai": lambda t: t.args_cai(),
}


@pytest.mark.parametrize("call", WINDOW_CALLS)
def test_body_calls_before_start_and_after_end(backend, call):
    with stf.context(backend=backend) as ctx:
        t = ctx.task(_data(ctx).rw(), symbol="windowed")
        pattern = rf"task 'windowed'\.{call}\(\) is only valid between start\(\) and end"
        with pytest.raises(ScopeError, match=pattern):
            WINDOW_CALLS[call](t)
        with t:
            WINDOW_CALLS[call](t)
        with pytest.raises(ScopeError, match=pattern):
            WINDOW_CALLS[call](t)


def test_stream_ptr_before_start(backend):
    with stf.context(backend=backend) as ctx:
        with pytest.raises(
            ScopeError, match=r"task 'early'\.stream_ptr\(\) before start"
        ):
            ctx.task(symbol="early").stream_ptr()


INDEX_ERRORS = [
    pytest.param(
        lambda t: t.get_arg(1),
        IndexError,
        r"get_arg\(\): dependency index 1 out of range \(the task has 1",
        id="get_arg-1",
    ),
    pytest.param(
        lambda t: t.get_arg(-1),
        IndexError,
        r"get_arg\(\): dependency index -1 out of range",
        id="get_arg-negative",
    ),
    pytest.param(
        lambda t: t.get_arg_cai(5),
        IndexError,
        r"get_arg_cai\(\): dependency index 5 out of range",
        id="get_arg_cai-5",
    ),
    pytest.param(
        lambda t: t.get_arg_cai(-2),
        IndexError,
        r"dependency index -2 out of range",
        id="get_arg_cai-negative",
    ),
    pytest.param(
        lambda t: t.get_arg("0"),
        TypeError,
        r"index must be an int, got str",
        id="get_arg-str",
    ),
    pytest.param(
        lambda t: t.get_stream_at_index(0),
        ScopeError,
        r"does not run on a grid of places; use stream_ptr\(\)",
        id="get_stream_at_index-scalar",
    ),
]


@pytest.mark.parametrize("case, error, pattern", INDEX_ERRORS)
def test_bad_indices_inside_the_body(backend, case, error, pattern):
    with stf.context(backend=backend) as ctx:
        with ctx.task(_data(ctx).read()) as t:
            with pytest.raises(error, match=pattern):
                case(t)
            t.get_arg(0)  # the task is still fine


@pytest.mark.parametrize("call", ["get_arg", "get_arg_cai"])
def test_argument_of_a_token(backend, call):
    with stf.context(backend=backend) as ctx:
        with ctx.task(ctx.token().rw(), _data(ctx).read()) as t:
            with pytest.raises(
                TypeError,
                match=rf"{call}\(\): cannot materialize a token argument: dependency 0 is a token, "
                r"which has no memory",
            ):
                getattr(t, call)(0)
            assert t.args_cai() is not None  # the data's view, token skipped


LIFECYCLE = {
    "add_dep-after-start": (
        lambda ctx, t: t.add_dep(_data(ctx, "y").read()),
        r"task 'life': add_dep\(\) after start\(\); add "
        r"dependencies before starting",
    ),
    "set_exec_place-after-start": (
        lambda ctx, t: t.set_exec_place(stf.exec_place.host()),
        r"task 'life': set_exec_place\(\) after start\(\)",
    ),
    "start-twice": (lambda ctx, t: t.start(), r"task 'life': start\(\) called twice"),
}


@pytest.mark.parametrize("misuse", LIFECYCLE)
def test_lifecycle_misuse_after_start(backend, misuse):
    function, pattern = LIFECYCLE[misuse]
    with stf.context(backend=backend) as ctx:
        t = ctx.task(_data(ctx).rw(), symbol="life")
        t.start()
        with pytest.raises(ScopeError, match=pattern):
            function(ctx, t)
        t.end()
        _assert_usable(ctx, backend)


def test_end_without_start_and_end_twice(backend):
    with stf.context(backend=backend) as ctx:
        t = ctx.task(_data(ctx).rw(), symbol="ended")
        with pytest.raises(
            ScopeError,
            match=r"task 'ended': end\(\) without a matching "
            r"start\(\)",
        ):
            t.end()
        t.start()
        t.end()
        with pytest.raises(ScopeError, match=r"task 'ended': end\(\) called twice"):
            t.end()
        _assert_usable(ctx, backend)


def test_end_called_inside_a_with_block(backend):
    with stf.context(backend=backend) as ctx:
        with pytest.raises(
            ScopeError,
            match=r"end\(\) called twice; a task in a 'with' "
            r"block is ended by the block",
        ):
            with ctx.task(_data(ctx).rw()) as t:
                t.end()
        _assert_usable(ctx, backend)


CONFLICTS_WHILE_STARTED = {
    "nested-task": lambda ctx, x: ctx.task(x.rw(), symbol="inner").start(),
    "host_launch": lambda ctx, x: ctx.host_launch(x.read(), fn=print),
    "wait": lambda ctx, x: ctx.wait(x),
}


@pytest.mark.parametrize("use", CONFLICTS_WHILE_STARTED)
def test_conflicting_access_on_the_same_thread_raises_instead_of_hanging(backend, use):
    with stf.context(backend=backend) as ctx:
        x = _data(ctx)
        with ctx.task(x.rw(), symbol="outer"):
            with pytest.raises(
                ScopeError,
                match=r"logical data 'x', which task 'outer' \(started, not "
                r"yet ended on this thread\).*end that task first",
            ):
                CONFLICTS_WHILE_STARTED[use](ctx, x)
        _assert_usable(ctx, backend)


def test_finalize_while_a_task_is_started(backend):
    with stf.context(backend=backend) as ctx:
        t = ctx.task(_data(ctx).rw(), symbol="open")
        t.start()
        with pytest.raises(
            ScopeError,
            match=r"finalize\(\) while task 'open' is started "
            r"but not ended; end the task first",
        ):
            ctx.finalize()
        t.end()
        _assert_usable(ctx, backend)


def test_body_exception_propagates_and_the_context_stays_usable(backend):
    with stf.context(backend=backend) as ctx:
        x = _data(ctx)
        with pytest.raises(KeyError, match="from the body"):
            with ctx.task(x.rw(), symbol="raiser") as t:
                raise KeyError("from the body")
        with pytest.raises(ScopeError, match="only valid between"):
            t.get_arg(0)  # the task was ended
        _assert_usable(ctx, backend)


# -- views -----------------------------------------------------------------------------


def test_view_used_after_its_task_ended(backend):
    _require_emulated(backend)
    with stf.context(backend=backend) as ctx:
        with ctx.task(_data(ctx).rw(), symbol="short") as t:
            view = t.get_arg_cai(0)
            np.asarray(view)  # fine inside the window
        with pytest.raises(
            ScopeError,
            match=r"a view of task 'short' was used after the "
            r"task ended; use views only between",
        ):
            np.asarray(view)
        _assert_usable(ctx, backend)


def test_read_only_view_written_by_a_body(backend):
    _require_emulated(backend)
    source = np.arange(3.0)
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(source)
        with ctx.task(x.read()) as t:
            array = np.asarray(t.get_arg_cai(0))
            assert t.get_arg_cai(0)["data"][1] is True
            with pytest.raises(ValueError, match="read-only"):
                array[0] = 1
        np.testing.assert_array_equal(ctx.wait(x), np.arange(3.0))
        _assert_usable(ctx, backend)
    np.testing.assert_array_equal(source, np.arange(3.0))


# -- host_launch -------------------------------------------------------------------------

HOST_LAUNCH = [
    pytest.param(
        lambda ctx: ctx.host_launch(_data(ctx).read()),
        TypeError,
        r"host_launch: fn is required \(host_launch\(\*deps, fn=callable\)\)",
        id="no-fn",
    ),
    pytest.param(
        lambda ctx: ctx.host_launch(_data(ctx).read(), fn=3, symbol="cb"),
        TypeError,
        r"host_launch 'cb': fn must be callable, got int",
        id="fn-not-callable",
    ),
    pytest.param(
        lambda ctx: ctx.host_launch(_data(ctx), fn=print),
        TypeError,
        r"host_launch: expected a dependency such as ld\.read\(\).*got "
        r"logical_data",
        id="bare-logical-data",
    ),
    pytest.param(
        lambda ctx: ctx.host_launch(5, fn=print),
        TypeError,
        r"expected a dependency.*got int",
        id="int-positional",
    ),
    pytest.param(
        lambda ctx: ctx.host_launch(_data(ctx).read(stf.data_place.device(0)), fn=print),
        PlaceError,
        r"data_place\('dev0'\) is not host-accessible; a host "
        r"callback sees data in data_place\.host\(\)",
        id="device-data-place",
    ),
    pytest.param(
        lambda ctx: ctx.host_launch(_data(ctx).read(), fn=print, symbol=3),
        TypeError,
        r"symbol must be a str, got int",
        id="symbol-int",
    ),
    pytest.param(
        lambda ctx: ctx.host_launch(_data(ctx).read(), fn=print, args=5),
        TypeError,
        r"args must be .*got int",
        id="args-not-iterable",
    ),
]


@pytest.mark.parametrize("case, error, pattern", HOST_LAUNCH)
def test_host_launch_arguments(backend, case, error, pattern):
    with stf.context(backend=backend) as ctx:
        with pytest.raises(error, match=pattern):
            case(ctx)


def test_context_usable_after_host_launch_errors(backend):
    with stf.context(backend=backend) as ctx:
        _run_family(ctx, HOST_LAUNCH)
        _assert_usable(ctx, backend)


# -- errors of asynchronous work, raised at the next synchronisation point -------------


def _after_callbacks(ctx: stf.context, ld: stf.logical_data) -> None:
    """Block (with a timeout) until every host callback on ``ld`` so far has run.

    The marker callback is ordered after them, and errors are captured before a
    callback's end is recorded, so they are pending once the marker has run.
    """
    ran = threading.Event()
    ctx.host_launch(ld.read(), fn=lambda _: ran.set(), symbol="marker")
    assert ran.wait(CALLBACK_TIMEOUT), "the marker callback never ran"


SYNC_POINTS = {
    "wait": lambda ctx, x: ctx.wait(x),
    "check_errors": lambda ctx, x: (_after_callbacks(ctx, x), ctx.check_errors()),
    "finalize": lambda ctx, x: ctx.finalize(),
}


def _failing(array: np.ndarray) -> None:
    raise KeyError("callback failed")


@pytest.mark.parametrize("sync", SYNC_POINTS)
def test_callback_exception_is_raised_at_the_next_sync_point(backend, sync):
    with stf.context(backend=backend) as ctx:
        x = _data(ctx)
        ctx.host_launch(x.rw(), fn=_failing, symbol="failing")
        with pytest.raises(KeyError, match="callback failed") as info:
            SYNC_POINTS[sync](ctx, x)
        assert "raised by host_launch 'failing'" in info.value.__notes__
        if sync != "finalize":
            _assert_usable(ctx, backend)


def test_fence_never_raises_callback_errors(backend):
    # API I-7: as in the reference, fence() leaves deferred errors pending.
    with stf.context(backend=backend) as ctx:
        x = _data(ctx)
        ctx.host_launch(x.rw(), fn=_failing, symbol="failing")
        _after_callbacks(ctx, x)
        assert isinstance(ctx.fence(), int)
        assert [type(e) for e in ctx.pending_errors()] == [KeyError]
        with pytest.raises(KeyError, match="callback failed"):
            ctx.check_errors()
        _assert_usable(ctx, backend)


def _submit_task(ctx: stf.context, x: stf.logical_data) -> None:
    with ctx.task(x.read()):
        pass


SUBMISSIONS_FROM_CALLBACKS = {
    "task": (_submit_task, r"task.* called from a host callback or launched function"),
    "host_launch": (
        lambda ctx, x: ctx.host_launch(x.read(), fn=print),
        r"host_launch called from a host callback",
    ),
    "logical_data_empty": (
        lambda ctx, x: ctx.logical_data_empty((2,)),
        r"logical_data_empty\(\) called from a host callback",
    ),
    "token": (lambda ctx, x: ctx.token(), r"token\(\) called from a host callback"),
    "fence": (lambda ctx, x: ctx.fence(), r"fence\(\) called from a host callback"),
    "wait": (lambda ctx, x: ctx.wait(x), r"wait\(\) called from a host callback"),
    "finalize": (
        lambda ctx, x: ctx.finalize(),
        r"finalize\(\) called from a host "
        r"callback",
    ),
}


@pytest.mark.parametrize("submission", SUBMISSIONS_FROM_CALLBACKS)
def test_callback_that_submits_work(backend, submission):
    function, pattern = SUBMISSIONS_FROM_CALLBACKS[submission]
    with stf.context(backend=backend) as ctx:
        x = _data(ctx)
        y = _data(ctx, "y")
        ctx.host_launch(x.rw(), fn=lambda _: function(ctx, y), symbol="submitter")
        _after_callbacks(ctx, x)
        with pytest.raises(ScopeError, match=pattern):
            ctx.check_errors()
        _assert_usable(ctx, backend)


def test_callback_that_submits_work_is_reported_by_finalize(backend):
    with stf.context(backend=backend) as ctx:
        x = _data(ctx)
        ctx.host_launch(x.rw(), fn=lambda _: _submit_task(ctx, x))
        with pytest.raises(ScopeError, match=r"must not submit to a context"):
            ctx.finalize()
        ctx.finalize()  # idempotent, nothing left


def test_callback_with_the_wrong_arity(backend):
    with stf.context(backend=backend) as ctx:
        x = _data(ctx)
        ctx.host_launch(x.rw(), fn=lambda: None, symbol="arity")  # wait() orders after
        with pytest.raises(
            TypeError, match=r"takes 0 positional arguments but 1"
        ) as info:
            ctx.wait(x)
        assert "raised by host_launch 'arity'" in info.value.__notes__
        _assert_usable(ctx, backend)


def test_two_failing_callbacks_are_raised_one_per_call_in_order(backend):
    # API I-7: one per call, oldest first (never an ExceptionGroup).
    with stf.context(backend=backend) as ctx:
        x = _data(ctx)
        ctx.host_launch(x.rw(), fn=_failing, symbol="first")
        ctx.host_launch(x.rw(), fn=lambda _: 1 / 0, symbol="second")
        with pytest.raises(KeyError) as first:
            ctx.wait(x)
        assert "raised by host_launch 'first'" in first.value.__notes__
        assert any("1 more pending" in note for note in first.value.__notes__)
        with pytest.raises(ZeroDivisionError) as second:
            ctx.check_errors()
        assert "raised by host_launch 'second'" in second.value.__notes__
        ctx.check_errors()  # nothing left
        _assert_usable(ctx, backend)


def test_callback_writing_a_read_only_array(backend):
    source = np.arange(3.0)
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(source)
        ctx.host_launch(x.read(), fn=lambda a: a.__setitem__(0, 7.0), symbol="sneaky")
        with pytest.raises(ValueError, match="read-only") as info:
            ctx.wait(x)
        assert "raised by host_launch 'sneaky'" in info.value.__notes__
        _assert_usable(ctx, backend)
    np.testing.assert_array_equal(source, np.arange(3.0))


def test_callback_error_is_raised_when_the_with_block_exits(backend):
    with pytest.raises(KeyError, match="callback failed"):
        with stf.context(backend=backend) as ctx:
            ctx.host_launch(_data(ctx).rw(), fn=_failing)


# -- stflow.emulated.launch ------------------------------------------------------------


def test_launch_argument_errors(backend):
    _require_emulated(backend)
    with stf.context(backend=backend) as ctx:
        with ctx.task(_data(ctx).rw()) as t:
            with pytest.raises(TypeError, match=r"launch: fn must be callable, got int"):
                stf.emulated.launch(t.stream_ptr(), 3)
            with pytest.raises(TypeError, match=r"a stream must be None, an int handle"):
                stf.emulated.launch("abc", print)
            with pytest.raises(
                ValueError,
                match=r"0x3039 is not a stream of the "
                r"emulated backend.*stream_ptr\(\)",
            ):
                stf.emulated.launch(12345, print)
        _assert_usable(ctx, backend)


LAUNCHED_FAILURES = {
    "raises": (lambda view: 1 / 0, ZeroDivisionError, r"division by zero"),
    "launches-again": (
        lambda view: stf.emulated.launch(0, print),
        ScopeError,
        r"launch\(\) called from work running in stream order",
    ),
    "writes-read-only": (lambda view: view.__setitem__(0, 1.0), ValueError, r"read-only"),
}


@pytest.mark.parametrize("failure", LAUNCHED_FAILURES)
def test_launched_work_errors_are_deferred(backend, failure):
    _require_emulated(backend)
    function, error, pattern = LAUNCHED_FAILURES[failure]
    with stf.context(backend=backend) as ctx:
        x = _data(ctx)
        with ctx.task(x.read()) as t:
            stf.emulated.launch(t.stream_ptr(), function, t.get_arg_cai(0))
        with pytest.raises(error, match=pattern):
            ctx.wait(x)
        _assert_usable(ctx, backend)


# -- wait -------------------------------------------------------------------------------

WAITS = [
    pytest.param(
        lambda ctx: ctx.wait(ctx.token()),
        TypeError,
        r"wait\(\) on token #\d+: a token holds no data; order on it with "
        r"fence\(\)",
        id="token",
    ),
    pytest.param(
        lambda ctx: ctx.wait(np.ones(3)),
        TypeError,
        r"wait\(\) expects a logical_data, got ndarray",
        id="ndarray",
    ),
    pytest.param(
        lambda ctx: ctx.wait("x"),
        TypeError,
        r"wait\(\) expects a logical_data, got str",
        id="str",
    ),
    pytest.param(
        lambda ctx: ctx.wait(_data(ctx).read()),
        TypeError,
        r"wait\(\) expects a logical_data, got dep",
        id="dep",
    ),
]


@pytest.mark.parametrize("case, error, pattern", WAITS)
def test_wait_arguments(backend, case, error, pattern):
    with stf.context(backend=backend) as ctx:
        with pytest.raises(error, match=pattern):
            case(ctx)


def test_context_usable_after_wait_errors(backend):
    with stf.context(backend=backend) as ctx:
        _run_family(ctx, WAITS)
        _assert_usable(ctx, backend)


# -- configuration ----------------------------------------------------------------------


@pytest.mark.parametrize("text", ["abc", "0", "-2", "1.5"])
def test_bad_emulated_device_count(backend, monkeypatch, text):
    # keep the process configuration (and its seed) for the tests that follow
    monkeypatch.setattr(stflow._core.config, "_config", stflow._core.config.config())
    monkeypatch.setenv("STFLOW_EMULATED_DEVICES", text)
    with pytest.raises(
        ValueError,
        match=rf"STFLOW_EMULATED_DEVICES={text!r} is not a "
        r"positive integer; set it to the number",
    ):
        stflow._core.config.reload().emulated_devices


def test_bad_backend_variable(backend, monkeypatch):
    monkeypatch.setattr(stflow._core.config, "_config", stflow._core.config.config())
    monkeypatch.setenv("STFLOW_BACKEND", "tpu")
    with pytest.raises(ValueError, match=r"STFLOW_BACKEND='tpu' is not one of auto"):
        stflow._core.config.reload()


def test_bad_emulated_device_count_fails_the_first_context(backend):
    _require_emulated(backend)
    program = (
        "import stflow as stf\n"
        "try:\n"
        "    stf.context(backend='emulated')\n"
        "except ValueError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    environment = dict(os.environ, STFLOW_EMULATED_DEVICES="abc")
    result = subprocess.run(
        [sys.executable, "-c", program],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "ValueError STFLOW_EMULATED_DEVICES='abc'" in result.stdout, result


@pytest.mark.parametrize(
    "error, builtin",
    [
        (AccessModeError, ValueError),
        (ContextFinalizedError, RuntimeError),
        (ContextMismatchError, ValueError),
        (PlaceError, ValueError),
        (ScopeError, RuntimeError),
        (ShapeError, ValueError),
        (BackendUnavailableError, ImportError),
    ],
)
def test_error_classes_keep_the_builtin_meaning(backend, error, builtin):
    assert issubclass(error, STFError) and issubclass(error, builtin)
