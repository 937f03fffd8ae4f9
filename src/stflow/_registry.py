"""Creating logical data: registering user buffers, empty data and tokens.

A mixin of :class:`~stflow._runtime.Runtime`. Registration describes the buffer
(``_sources.py``), checks the place it claims against where the memory really is,
page-locks host memory once per owning array (so that device work can reach it and
copies run at full speed), and makes the buffer the data's *reference instance*. Every
logical data gets a key and a weak finalizer: when the object is collected before
``finalize()``, its key is queued and the runtime writes the data back and frees its
instances at its next submission or synchronisation (``Runtime.drain_retired``).
"""

from __future__ import annotations

import itertools
import math
import threading
import weakref
from collections import deque
from typing import Any

import numpy as np

from ._coherence import DataState
from ._errors import (BackendUnavailableError, ContextFinalizedError, PlaceError,
                      ShapeError)
from ._logical_data import logical_data
from ._places import AFFINE, data_place
from ._sources import check_dtype, describe_buffer
from .backends._base import HOST, MANAGED, USER_PAGEABLE, Allocation, Backend, Stream

__all__ = ["DataRegistry", "byte_size", "check_shape"]


def _describe_place(device: int) -> str:
    if device >= 0:
        return f"device {device}"
    return {HOST: "the host", MANAGED: "managed memory",
            USER_PAGEABLE: "the host"}.get(device, str(device))


class DataRegistry:
    """Data creation, shared by every context (mixed into ``Runtime``)."""

    backend: Backend
    lock: threading.RLock
    data: dict[int, DataState]
    keys: itertools.count
    retired: deque[int]
    caller_stream: Stream | None
    pinned_roots: dict[int, list[Any]]
    finalized: bool
    data_class: type = logical_data
    """The class of the logical data this registry creates (stackable contexts
    create ``stackable_logical_data``)."""

    def check_submit(self, what: str) -> None:
        raise NotImplementedError  # pragma: no cover - provided by Runtime

    def pool(self, device: int) -> Any:
        raise NotImplementedError  # pragma: no cover - provided by Runtime

    def check_device(self, device: int, what: Any) -> int:
        raise NotImplementedError  # pragma: no cover - provided by Runtime

    def _adopt(self, ld: logical_data | None, state: DataState | None,
               shape: tuple | None, dtype: np.dtype | None, readonly: bool,
               name: str | None, source: Any) -> logical_data:
        key = next(self.keys)
        if ld is None:
            ld = object.__new__(self.data_class)
        ld._runtime = self  # type: ignore[assignment]  # the Runtime this is mixed into
        ld._state = state
        ld._shape = shape
        ld._dtype = dtype
        ld._readonly = readonly
        ld._symbol = name
        ld._is_token = shape is None
        ld._source = source
        ld._key = key
        if state is not None:
            state.label = ld._label()
            self.data[key] = state
            finalizer = weakref.finalize(ld, _retire, weakref.ref(self), key)
            finalizer.atexit = False
        return ld

    def register(self, ld: logical_data | None, buf: Any, dplace: Any, name: Any,
                 shape: Any = None, dtype: Any = None) -> logical_data:
        """Register a user buffer as the reference instance of a new logical data."""
        self.check_submit("logical_data()")
        _check_name(name)
        if dplace is not None and not isinstance(dplace, data_place):
            raise TypeError(f"dplace must be a data_place or None, got "
                            f"{type(dplace).__name__}")
        source = describe_buffer(buf, self.producer_stream)
        if shape is not None and not hasattr(shape, "__iter__"):
            raise TypeError(f"logical_data: shape must be a tuple of ints such as "
                            f"{source.shape}, got {shape!r}")
        if shape is not None and tuple(shape) != source.shape:
            raise ShapeError(f"shape={tuple(shape)} does not match the buffer's shape "
                             f"{source.shape}")
        if dtype is not None and np.dtype(dtype) != source.dtype:
            raise ShapeError(f"dtype={np.dtype(dtype)} does not match the buffer's "
                             f"dtype {source.dtype}")
        backend = self.backend
        if backend.name == "emulated" and (
                source.interface == "cai" or source.dlpack_device not in (None, (1, 0))):
            raise BackendUnavailableError(
                f"a {type(buf).__name__} in GPU memory needs the CUDA backend; this "
                "context runs on the emulated backend (install stflow[cu12] or "
                "stflow[cu13] on a machine with a GPU, or pass a NumPy array)"
            )
        device = backend.locate(source.ptr) if source.ptr else HOST
        if dplace is not None:
            wanted = dplace.device_id
            if wanted == AFFINE or wanted < MANAGED:
                raise PlaceError(f"{dplace!r} cannot hold a user buffer; give the place "
                                 "where the buffer lives, or omit dplace")
            if wanted != device:
                raise PlaceError(
                    f"dplace={dplace!r} contradicts the buffer, which lives in "
                    f"{_describe_place(device)}; omit dplace to infer it"
                )
        self.sync_producer(source.stream)
        if device == HOST and source.ptr and source.interface != "cai":
            owner = source.keepalive[-1] if isinstance(source.keepalive, tuple) else None
            pin = (self._pin_host(owner) if isinstance(owner, np.ndarray) else None)
            if pin is None and not backend.is_pinned(source.ptr, source.nbytes) \
                    and backend.pinned_host_required:
                device = USER_PAGEABLE
        else:
            pin = None
        state = DataState(source.nbytes)
        state.pin = pin
        reference = state.set_reference(device, Allocation(
            source.ptr, source.nbytes, device, source.dtype, source.keepalive))
        if source.ordered_on is not None:    # a DLPack producer's pending work
            with self.lock:
                reference.ready = {source.ordered_on: backend.record(source.ordered_on)}
        return self._adopt(ld, state, source.shape, source.dtype, source.readonly,
                           name, source.keepalive)

    def producer_stream(self, device: tuple[int, int]) -> Stream | None:
        """The stream a DLPack producer in GPU memory (DLPack ``device``) is asked to
        order its pending work on; ``None`` where GPU memory cannot be used."""
        if self.backend.name != "cuda":
            return None
        ordinal = device[1] if device[0] in (2, 13) else HOST
        if ordinal != HOST:
            self.check_device(ordinal, "logical_data")
        with self.lock:
            pool = self.pool(ordinal)
            return pool.streams[pool.next]

    def _pin_host(self, array: np.ndarray) -> int | None:
        """Page-lock the memory of a user host array; returns the pin's key, or
        ``None`` when this context did not page-lock it.

        The whole array owning the memory is registered, once per context, and
        counted: slices of one array (blocks of a matrix) share pages at their edges,
        and the driver refuses overlapping registrations. A pin is undone when the
        last logical data using it has been retired and its work completed, or at
        finalize; a caller-stream context, which does not synchronise, pins nothing.
        """
        root = array
        while isinstance(root.base, np.ndarray):
            root = root.base
        if not root.flags.c_contiguous:
            root = array
        key = int(root.__array_interface__["data"][0])
        entry = self.pinned_roots.get(key)
        if entry is not None:
            entry[2] += 1
            return key
        if self.caller_stream is None:
            token = self.backend.register_host(root)
            if token is not None:
                self.pinned_roots[key] = [root, token, 1]
                return key
        return None

    def unpin(self, key: int | None) -> None:
        """Drop one use of a pin; the last one undoes the page-locking."""
        entry = self.pinned_roots.get(key) if key is not None else None
        if entry is not None:
            entry[2] -= 1
            if entry[2] == 0:
                del self.pinned_roots[key]  # type: ignore[arg-type]
                self.backend.unregister_host(entry[1])

    def sync_producer(self, stream: int | None) -> None:
        """Wait for a CUDA Array Interface producer's stream (backends may override)."""
        if stream is not None:
            sync = getattr(self.backend, "synchronize_handle", None)
            if sync is not None:
                sync(stream)

    def empty(self, shape: Any, dtype: Any, name: Any,
              what: str = "logical_data_empty") -> logical_data:
        """A logical data without a user buffer or initial value."""
        self.check_submit(f"{what}()")
        _check_name(name)
        shape = check_shape(shape, what)
        dtype = check_dtype(np.float64 if dtype is None else dtype, what)
        return self.empty_checked(shape, dtype, name)

    def empty_checked(self, shape: tuple[int, ...], dtype: np.dtype,
                      name: str | None) -> logical_data:
        """``empty`` for a shape and dtype already known to be valid (any shape a
        registered buffer can have: 0-d and zero-size included)."""
        self.check_submit("empty_like()")
        return self._adopt(None, DataState(byte_size(shape, dtype, "logical_data_empty")),
                           shape, dtype, False, name, None)

    def token(self) -> logical_data:
        self.check_submit("token()")
        return self._adopt(None, DataState(0), None, None, False, None, None)

    def owns(self, ld: logical_data, what: str) -> None:
        if ld._runtime is not self:
            from ._errors import ContextMismatchError
            if ld._runtime.finalized:
                raise ContextFinalizedError(
                    f"{what}: logical data {ld._label()} belongs to a finalized context")
            raise ContextMismatchError(
                f"{what}: logical data {ld._label()} belongs to another context; "
                "create it in this context (ctx.logical_data(...))"
            )


def _retire(runtime_ref: weakref.ref, key: int) -> None:
    runtime = runtime_ref()
    if runtime is not None and not runtime.finalized:
        runtime.retired.append(key)


def _check_name(name: Any) -> None:
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str or None, got {type(name).__name__}")


def byte_size(shape: tuple[int, ...], dtype: np.dtype, what: str) -> int:
    """``prod(shape) * itemsize`` in exact integers, refusing sizes beyond 2**63."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes >= 1 << 63:
        raise ValueError(f"{what}: shape {shape} of {dtype} needs {nbytes} bytes, more "
                         "than any device can address")
    return nbytes


def check_shape(shape: Any, what: str) -> tuple[int, ...]:
    """Validate a shape given as an iterable of positive integers."""
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise TypeError(f"{what}: shape must be a tuple of ints such as (10,), got "
                        f"{shape!r}")
    result = []
    for extent in shape:
        if isinstance(extent, bool) or not hasattr(type(extent), "__index__"):
            raise TypeError(f"{what}: shape {tuple(shape)!r} has a non-integer extent "
                            f"{extent!r}")
        result.append(extent.__index__())
    if not result:
        raise ValueError(f"{what}: shape must not be empty")
    if any(extent <= 0 for extent in result):
        raise ValueError(f"{what}: every extent must be positive, got {tuple(result)}")
    return tuple(result)
