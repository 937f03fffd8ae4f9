"""The logical data of a runtime: creation, page-locking, and retirement.

A :class:`DataRegistry` is one part of a runtime. It creates the
:class:`~stflow._core.coherence.DataState` of every logical data and keeps them by key:

Registration of a user buffer
    The buffer is described (``_interchange/sources.py``), the place it claims is checked against
    where its memory really is, host memory is page-locked once per owning array (so
    that device work can reach it and copies run at full speed) and the buffer
    becomes the data's *reference instance*.
Overlapping buffers
    The byte range of every registered buffer is kept (sorted by start): a new buffer
    overlapping a live one raises :class:`~stflow.errors.BufferOverlapError` unless
    both are read-only. A strided buffer (a tile of a matrix) spans more bytes than
    it holds, so where its range meets another the two layouts are compared exactly
    (``_layout.regions_overlap``): the tiles of one matrix interleave but share no
    byte, two grids of tiles over one matrix do. Two logical data over the same bytes would each have their
    own instances, so one would read stale values and ``finalize()`` would write both
    back (last writer wins); overlapping read-only data can neither be written nor
    written back, so they are harmless (the same constant table used by several
    tasks, say).
Empty data and tokens
    A state without instances (its first writer allocates them), or without bytes.
Retirement
    When a logical data object is collected before ``finalize()``, its key is queued
    (from whatever thread the collector runs on); the runtime drains the queue at its
    next submission or synchronisation point (``Runtime.drain_retired``).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from .._core.coherence import DataState
from .._core.config import pin_limit
from .._core.errors import (
    BackendUnavailableError,
    BufferOverlapError,
    PlaceError,
    ShapeError,
)
from .._core.layout import extent, region, regions_overlap
from .._interchange.sources import Source, check_dtype, describe_buffer
from .._places.places import data_place
from ..backends._base import (
    AFFINE,
    HOST,
    MANAGED,
    USER_PAGEABLE,
    Allocation,
    Backend,
    pointer_array,
)

__all__ = ["DataRegistry", "byte_size", "check_name", "check_shape"]

_keys = itertools.count(1)
"""Keys of logical data: unique in the process, never reused."""


class _Pin:
    """One page-locked user array, shared by the data registered from it."""

    __slots__ = ("array", "token", "uses")

    def __init__(self, array: np.ndarray, token: Any) -> None:
        self.array = array
        self.token = token
        self.uses = 1


class DataRegistry:
    """The data states of one runtime (see the module docstring).

    Parameters
    ----------
    backend : Backend
        Where the data lives.
    may_pin : bool
        Whether user host buffers may be page-locked (not in a caller-stream context,
        which never synchronises and so could not undo it safely).
    """

    def __init__(self, backend: Backend, may_pin: bool) -> None:
        self.backend = backend
        self.may_pin = may_pin
        self.states: dict[int, DataState] = {}
        self.retired: deque[int] = deque()
        self.pins: dict[int, _Pin] = {}
        self.closed = False
        # Byte ranges of registered buffers: (start, end, key, readonly), sorted.
        self.ranges: list[tuple[int, int, int, bool]] = []
        self.range_of: dict[int, tuple[int, int, int, bool]] = {}
        self.layouts: dict[int, np.ndarray] = {}  # key -> region, strided buffers
        self.longest = 0

    # -- creation ----------------------------------------------------------------------
    def describe(
        self,
        buf: Any,
        dplace: Any,
        shape: Any,
        dtype: Any,
        producer_stream: Callable[[tuple[int, int]], Any] | None,
    ) -> tuple[Source, int]:
        """The source of the user buffer ``buf`` and the place its memory is in,
        checked: ``dplace`` (a ``data_place`` or ``None``) must agree with where the
        buffer lives; ``shape`` and ``dtype``, when given, with the buffer. A
        producer's pending work (CUDA Array Interface ``stream``) is waited for.

        Touches nothing of the registry: runs without the runtime's lock, before
        :meth:`add`.
        """
        if dplace is not None and not isinstance(dplace, data_place):
            raise TypeError(
                f"dplace must be a data_place or None, got {type(dplace).__name__}"
            )
        backend = self.backend
        source = describe_buffer(buf, producer_stream if backend.gpu_memory else None)
        if shape is not None and not hasattr(shape, "__iter__"):
            raise TypeError(
                f"logical_data: shape must be an iterable of integers such "
                f"as {source.shape}, got {shape!r}"
            )
        if shape is not None and tuple(shape) != source.shape:
            raise ShapeError(
                f"shape={tuple(shape)} does not match the buffer's shape {source.shape}"
            )
        if dtype is not None and np.dtype(dtype) != source.dtype:
            raise ShapeError(
                f"dtype={np.dtype(dtype)} does not match the buffer's "
                f"dtype {source.dtype}"
            )
        if not backend.gpu_memory and (
            source.interface == "cai" or source.dlpack_device not in (None, (1, 0))
        ):
            raise BackendUnavailableError(
                f"a {type(buf).__name__} in GPU memory needs the CUDA backend; this "
                f"context runs on the {backend.name} backend (install stflow[cu12] or "
                "stflow[cu13] on a machine with a GPU, or pass a NumPy array)"
            )
        device = backend.locate(source.ptr) if source.ptr else HOST
        if dplace is not None:
            wanted = dplace.device_id
            if wanted == AFFINE or wanted < MANAGED:
                raise PlaceError(
                    f"{dplace!r} cannot hold a user buffer; give the place "
                    "where the buffer lives, or omit dplace"
                )
            if wanted != device:
                raise PlaceError(
                    f"dplace={dplace!r} contradicts the buffer, which lives "
                    f"in {_describe_place(device)}; omit dplace to infer it"
                )
        if source.stream is not None:
            backend.synchronize_producer(source.stream)
        return source, device

    def add(self, source: Source, device: int, buf: Any) -> DataState:
        """A new state whose reference instance is the buffer of ``source`` (from
        :meth:`describe`), at ``device``.

        The runtime's lock must be held: the overlap check and the insertion of the
        buffer's byte range are one step against retirement (:meth:`take_retired`,
        which removes ranges) and the registrations of other threads; so is the
        page-locking count against :meth:`unpin`.

        Raises
        ------
        BufferOverlapError
            The buffer overlaps the buffer of a live logical data (see the module).
        """
        span = source.extent
        layout = None
        if source.strides is not None and source.ptr:
            layout = region(
                source.ptr, source.shape, source.strides, source.dtype.itemsize
            )
        if source.ptr and span:
            self._check_overlap(source.ptr, span, source.readonly, buf, layout)
        pin = None
        backend = self.backend
        if device == HOST and source.ptr and source.interface != "cai":
            owner = source.keepalive[-1] if isinstance(source.keepalive, tuple) else None
            if isinstance(owner, np.ndarray):
                pin = self._pin(owner)
            if (
                pin is None
                and backend.pinned_host_required
                and not backend.is_pinned(source.ptr, span)
            ):
                device = USER_PAGEABLE
        state = DataState(next(_keys), source.nbytes, source.dtype, shape=source.shape)
        state.pin = pin
        state.set_reference(
            device,
            Allocation(
                source.ptr,
                source.nbytes,
                device,
                source.dtype,
                source.keepalive,
                source.strides,
            ),
        )
        self.states[state.key] = state
        if source.ptr and span:
            entry = (source.ptr, source.ptr + span, state.key, source.readonly)
            bisect.insort(self.ranges, entry)
            self.range_of[state.key] = entry
            self.longest = max(self.longest, span)
            if layout is not None:
                self.layouts[state.key] = layout
        return state

    def _check_overlap(
        self, ptr: int, nbytes: int, readonly: bool, buf: Any, layout: np.ndarray | None
    ) -> None:
        """Raise :class:`BufferOverlapError` when the buffer spanning ``[ptr, ptr +
        nbytes)`` (its :func:`~stflow._core.layout.region` ``layout`` when strided) shares
        bytes with a registered buffer and one of the two is writable."""
        ranges = self.ranges
        layouts = self.layouts
        end = ptr + nbytes
        # Candidates start before ``end`` and no earlier than ``ptr - longest``.
        index = bisect.bisect_left(ranges, (end,))
        while index > 0:
            index -= 1
            start, stop, key, other_readonly = ranges[index]
            if start + self.longest <= ptr:
                break
            if stop <= ptr or (readonly and other_readonly):
                continue
            other = layouts.get(key)
            if (layout is not None or other is not None) and not regions_overlap(
                region(ptr, (nbytes,), None, 1) if layout is None else layout,
                region(start, (stop - start,), None, 1) if other is None else other,
            ):
                continue  # interleaved strided buffers: disjoint
            state = self.states.get(key)
            label = state.label if state is not None else f"#{key}"
            same = start == ptr and stop == end
            what = "is the buffer of" if same else "overlaps the buffer of"
            raise BufferOverlapError(
                f"logical_data(): the {type(buf).__name__} of {nbytes} bytes at "
                f"0x{ptr:x} {what} logical data {label}, registered in this context: "
                "two logical data over the same bytes would each keep their own copy "
                "(stale reads, and finalize() would write both back); use the "
                "existing logical data, register disjoint slices, or make both "
                "buffers read-only (buf.setflags(write=False)) if they are only read"
            )

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> DataState:
        """A new state without a value (shape and dtype already checked)."""
        state = DataState(
            next(_keys), byte_size(shape, dtype, "logical_data_empty"), dtype, shape=shape
        )
        self.states[state.key] = state
        return state

    def token(self) -> DataState:
        """A new state without bytes, for ordering only."""
        state = DataState(next(_keys), 0, None, is_token=True)
        self.states[state.key] = state
        return state

    # -- page-locking ------------------------------------------------------------------
    def pin_pageable(self, ptr: int, nbytes: int) -> None:
        """Page-lock, whatever ``STFLOW_PIN_LIMIT`` says, the user arrays of the
        pageable data whose buffers hold the host bytes ``[ptr, ptr + nbytes)``.

        For a copy recorded into a loop body: a conditional graph node runs kernels,
        copies and fills only, so a copy of pageable memory there cannot be staged
        by host work; page-locked, it is a plain copy node. The pin is the data's
        own (undone when it is retired, or at finalize). Data whose buffer is not a
        NumPy array cannot be page-locked here and is left as it is (the backend
        then refuses the copy with a ``ScopeError``). The lock must be held.
        """
        ranges = self.ranges
        end = ptr + nbytes
        index = bisect.bisect_right(ranges, (ptr, float("inf")))
        while index > 0:
            index -= 1
            start, stop, key, _ = ranges[index]
            if start + self.longest <= ptr:
                break
            state = self.states.get(key)
            if (
                state is None
                or stop < end
                or state.pin is not None
                or state.reference is None
                or state.reference.device != USER_PAGEABLE
            ):
                continue
            allocation = state.reference.allocation
            keepalive = None if allocation is None else allocation.owner
            owner = keepalive[-1] if isinstance(keepalive, tuple) else keepalive
            if isinstance(owner, np.ndarray):
                state.pin = self._pin(owner, limited=False)

    def _pin(self, array: np.ndarray, limited: bool = True) -> int | None:
        """Page-lock the memory of a user host array; returns the pin's key, or
        ``None`` when it was not page-locked here.

        The whole array owning the memory is registered, once per runtime, and
        counted: slices of one array (blocks of a matrix) share pages at their edges,
        and the driver refuses overlapping registrations. A pin is undone when the
        last data using it has been retired and its work completed, or at finalize.
        An owner larger than ``STFLOW_PIN_LIMIT`` is not page-locked (unless not
        ``limited``: :meth:`pin_pageable`): its data lives at ``USER_PAGEABLE`` and the
        backend stages its copies.
        """
        root = array
        while isinstance(root.base, np.ndarray):
            root = root.base
        if not (root.flags.c_contiguous or root.flags.f_contiguous):
            root = _span_of(array)  # no contiguous owner: the bytes it spans
        key = int(root.__array_interface__["data"][0])
        pin = self.pins.get(key)
        if pin is not None:
            pin.uses += 1
            return key
        limit = pin_limit() if limited else None
        if self.may_pin and (limit is None or root.nbytes <= limit):
            token = self.backend.register_host(root)
            if token is not None:
                self.pins[key] = _Pin(root, token)
                return key
        return None

    def unpin(self, key: int | None) -> None:
        """Drop one use of a pin; the last one undoes the page-locking."""
        if key is None:
            return
        pin = self.pins.get(key)
        if pin is not None:
            pin.uses -= 1
            if pin.uses == 0:
                del self.pins[key]
                self.backend.unregister_host(pin.token)

    # -- retirement and the end --------------------------------------------------------
    def retire(self, key: int) -> None:
        """Queue the data ``key`` whose logical data object was collected (any thread)."""
        if not self.closed:
            self.retired.append(key)

    def take_retired(self) -> list[DataState]:
        """The states of the retired data, removed from the registry."""
        taken = []
        retired = self.retired
        while retired:
            key = retired.popleft()
            state = self.states.pop(key, None)
            if state is not None:
                taken.append(state)
            entry = self.range_of.pop(key, None)
            if entry is not None:
                del self.ranges[bisect.bisect_left(self.ranges, entry)]
                self.layouts.pop(key, None)
        return taken

    def clear(self) -> None:
        """Forget every state and undo every page-locking (at finalize)."""
        self.closed = True
        self.states.clear()
        self.retired.clear()
        self.ranges.clear()
        self.range_of.clear()
        self.layouts.clear()
        for pin in self.pins.values():
            self.backend.unregister_host(pin.token)
        self.pins.clear()


def _span_of(array: np.ndarray) -> np.ndarray:
    """The bytes from the first element of ``array`` to one past its last, as a
    contiguous byte array keeping ``array`` alive (what page-locking a strided array
    whose owner is not contiguous must cover)."""
    if array.flags.c_contiguous or array.flags.f_contiguous:
        return array
    ptr = int(array.__array_interface__["data"][0])
    strides = tuple(int(s) for s in array.strides)
    nbytes = extent(tuple(array.shape), strides, array.itemsize)
    return pointer_array(ptr, (nbytes,), np.dtype(np.uint8), False, array)


def _describe_place(device: int) -> str:
    if device >= 0:
        return f"device {device}"
    return {HOST: "the host", MANAGED: "managed memory", USER_PAGEABLE: "the host"}.get(
        device, str(device)
    )


def check_name(name: Any) -> None:
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str or None, got {type(name).__name__}")


def byte_size(shape: tuple[int, ...], dtype: np.dtype, what: str) -> int:
    """``prod(shape) * itemsize`` in exact integers, refusing sizes beyond 2**63."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes >= 1 << 63:
        raise ValueError(
            f"{what}: shape {shape} of {dtype} needs {nbytes} bytes, more "
            "than any device can address"
        )
    return nbytes


def check_shape(shape: Any, what: str) -> tuple[int, ...]:
    """Validate a shape given as an iterable of positive integers."""
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise TypeError(
            f"{what}: shape must be an iterable of integers such as (10,), got {shape!r}"
        )
    result = []
    for size in shape:
        if isinstance(size, bool) or not hasattr(type(size), "__index__"):
            raise TypeError(
                f"{what}: shape must be an iterable of integers; "
                f"{tuple(shape)!r} has the non-integer extent {size!r}"
            )
        result.append(size.__index__())
    if not result:
        raise ValueError(f"{what}: shape must contain at least one dimension")
    if any(size <= 0 for size in result):
        raise ValueError(
            f"{what}: all shape dimensions must be positive integers, got {tuple(result)}"
        )
    return tuple(result)


def check_empty_args(
    shape: Any, dtype: Any, what: str
) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype of ``logical_data_empty`` and friends, checked."""
    return check_shape(shape, what), check_dtype(
        np.float64 if dtype is None else dtype, what
    )
