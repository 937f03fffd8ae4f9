"""Green contexts and places bound to CUDA contexts: SM partitions of one device.

A *green context* owns a subset of a device's SMs: kernels launched on its streams
run only on those SMs. stflow models each one as a
:class:`~stflow._stream_partitions.StreamPartition` held by an execution place; the runtime creates the place's streams *in* the
partition (``backend.create_stream(device, sink, partition)``), so every task on the
place runs within its SMs, in stream and in graph mode (captured streams are the
partition's too, so kernel nodes keep their green context when the graph is
instantiated from them).

Three ways in, as in the reference:

``green_context_helper(sm_count, dev_id)``
    splits the device into as many partitions of ``sm_count`` SMs as fit;
    ``helper.get_view(i)`` names one, for ``exec_place.green_ctx(view)`` and
    ``data_place.green_ctx(view)``.
``green_places(sms_per_place, n_places, device_id, coscheduled_sm_count)``
    the same through ``cuda.core``, returning ``exec_place.from_context`` places.
``exec_place.from_context(ctx, dev_id=-1)``
    a place bound to an existing context: an ``int`` ``CUcontext`` or an object with
    ``.handle`` (a ``cuda.core`` ``Context``, green or not). A device's primary
    context gives an ordinary device place.

Backends. On a backend whose devices have CUDA contexts (``backend.cuda_contexts``:
the CUDA backend) the partitions are ``cuda.core`` green contexts (``_cuda_green``).
On the others (the emulated backend) a virtual device has :data:`EMULATED_SM_COUNT`
SMs split in multiples of :data:`EMULATED_SM_GRANULARITY`; a partition is a label
carried by its streams (``stream.partition``), work is not throttled. Emulated "CUDA
contexts" are :class:`EmulatedContext` objects, which is what ``green_places`` returns
as ``backing_context`` there; ``from_context`` accepts them or their ``handle``.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

from .._errors import BackendUnavailableError, NegativeIndexError, PlaceError
from .locality import locality_domain_count, locality_domain_places
from .places import _default_backend, check_device_ordinal, data_place, exec_place
from .stream_partitions import StreamPartition

__all__ = ["EMULATED_SM_COUNT", "EMULATED_SM_GRANULARITY", "EmulatedContext",
           "green_context_helper", "green_ctx_view", "green_places",
           "locality_domain_count", "locality_domain_places"]

EMULATED_SM_COUNT = 32
"""SMs of an emulated virtual device."""

EMULATED_SM_GRANULARITY = 2
"""Emulated partitions hold a multiple of this many SMs (the minimum partition)."""

_emulated_handles = itertools.count(0x6C0000)
_emulated_contexts: weakref.WeakValueDictionary[int, EmulatedContext] = \
    weakref.WeakValueDictionary()


def _check_positive(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return int(value)


def _checked_device(dev_id: Any, what: str) -> tuple[Any, int]:
    """The default backend and ``dev_id`` checked against its device count (I-8)."""
    device = check_device_ordinal(dev_id, what)
    backend = _default_backend()
    return backend, check_device_ordinal(device, what, backend.device_count)


class EmulatedContext:
    """The emulated backend's stand-in for a CUDA context: an SM partition of a
    virtual device (what ``green_places`` returns as ``backing_context`` there).

    Attributes
    ----------
    handle : int
        An opaque id, accepted by ``exec_place.from_context`` like a ``CUcontext``.
    device_id : int
        The virtual device.
    sm_count : int
        Its SMs.
    is_green : bool
        Always ``True``.
    """

    __slots__ = ("handle", "device_id", "sm_count", "partition", "__weakref__")
    is_green = True

    def __init__(self, device_id: int, sm_count: int, index: int) -> None:
        self.handle = next(_emulated_handles)
        self.device_id = device_id
        self.sm_count = sm_count
        self.partition = StreamPartition(
            device_id, None, f"green_ctx(dev={device_id}, ctx={index})", sm_count)
        _emulated_contexts[self.handle] = self

    def __repr__(self) -> str:
        return (f"EmulatedContext(handle=0x{self.handle:x}, device_id={self.device_id}, "
                f"sm_count={self.sm_count})")


def _emulated_split(device: int, sm_count: int, n_places: int | None) -> list[int]:
    """SM counts of the emulated partitions of ``sm_count`` SMs (rounded up to the
    granularity), ``n_places`` of them or as many as fit."""
    granule = EMULATED_SM_GRANULARITY
    size = max(granule, -(-sm_count // granule) * granule)
    fit = EMULATED_SM_COUNT // size
    wanted = fit if n_places is None else n_places
    if wanted > fit or fit == 0:
        raise RuntimeError(
            f"could not partition device {device} into {wanted} places of {sm_count} "
            f"SMs: a virtual device has {EMULATED_SM_COUNT} SMs, partitions are "
            f"multiples of {granule}, so {fit} fit; ask for fewer or smaller places")
    return [size] * wanted


class green_context_helper:
    """Green contexts of ``sm_count`` SMs each, as many as fit on device ``dev_id``.

    Parameters
    ----------
    sm_count : int
        SMs per green context (rounded up by the driver to its granularity).
    dev_id : int
        The device to partition.

    Raises
    ------
    ValueError
        ``sm_count < 1``.
    PlaceError
        ``dev_id`` is not a device of the default backend.
    RuntimeError
        The device cannot be partitioned so (no driver support, too few SMs).
    """

    __slots__ = ("_device", "_sm_count", "_partitions", "_contexts", "__weakref__")
    _contexts: list[Any]
    _partitions: list[StreamPartition]

    def __init__(self, sm_count: int, dev_id: int = 0) -> None:
        if isinstance(sm_count, bool) or not isinstance(sm_count, int):
            raise TypeError(f"sm_count must be an int, got {type(sm_count).__name__}")
        if sm_count < 1:
            raise ValueError(f"sm_count must be a positive integer, got {sm_count}")
        backend, device = _checked_device(dev_id, "green_context_helper")
        self._device = device
        self._sm_count = sm_count
        if backend.cuda_contexts:
            from ..backends import _cuda_green
            try:
                contexts = _cuda_green.split_device(device, sm_count, None, 0)
            except BackendUnavailableError as exc:      # API.md 3.28: RuntimeError
                raise RuntimeError(f"green_context_helper: {exc}") from exc
            self._contexts = [ctx for ctx, _ in contexts]
            self._partitions = [
                StreamPartition(device, _cuda_green.ContextPartition(ctx),
                                f"green_ctx(dev={device}, ctx={i})", sms)
                for i, (ctx, sms) in enumerate(contexts)]
        else:
            self._contexts = [EmulatedContext(device, sms, i) for i, sms in
                              enumerate(_emulated_split(device, sm_count, None))]
            self._partitions = [ctx.partition for ctx in self._contexts]

    def get_count(self) -> int:
        """The number of green contexts."""
        return len(self._partitions)

    def __len__(self) -> int:
        return len(self._partitions)

    @property
    def device_id(self) -> int:
        return self._device

    def get_view(self, idx: int) -> green_ctx_view:
        """Green context ``idx``; out of range or negative → ``IndexError``."""
        if isinstance(idx, bool) or not isinstance(idx, int):
            raise TypeError(f"get_view expects an int, got {type(idx).__name__}")
        count = len(self._partitions)
        if idx < 0:
            raise NegativeIndexError(f"get_view: negative green context index {idx}; "
                                     f"this helper has 0..{count - 1}")
        if not 0 <= idx < count:
            raise IndexError(f"green context index {idx} out of range: this helper of "
                             f"device {self._device} has {count} (0..{count - 1})")
        return green_ctx_view._make(self, idx)

    def __repr__(self) -> str:
        return f"green_context_helper(device_id={self._device}, count={self.get_count()})"


class green_ctx_view:
    """One green context of a :class:`green_context_helper` (which it keeps alive).

    Get one with ``helper.get_view(idx)``.
    """

    __slots__ = ("_helper", "_index")
    _helper: green_context_helper
    _index: int

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("green_ctx_view cannot be constructed directly; use "
                        "green_context_helper(sm_count, dev_id).get_view(idx)")

    @classmethod
    def _make(cls, helper: green_context_helper, index: int) -> green_ctx_view:
        view = cls.__new__(cls)
        view._helper = helper
        view._index = index
        return view

    @property
    def helper(self) -> green_context_helper:
        return self._helper

    @property
    def index(self) -> int:
        return self._index

    @property
    def device_id(self) -> int:
        return self._helper._device

    @property
    def _partition(self) -> StreamPartition:
        return self._helper._partitions[self._index]

    def __repr__(self) -> str:
        return f"green_ctx_view(device_id={self.device_id}, index={self._index})"


# -- places --------------------------------------------------------------------------
class _partition_place(exec_place):
    """An execution place whose streams live in a green context or a foreign CUDA
    context (``_partition``); ``_backing`` is what keeps that context alive."""

    __slots__ = ("_partition", "_backing", "_label", "_native_context")
    _partition: StreamPartition | None
    _backing: Any
    _label: str
    _native_context: int

    @classmethod
    def _new(cls, device: int, partition: StreamPartition | None, backing: Any,
             label: str, native_context: int = 0) -> _partition_place:
        place = cls._make(device)
        assert isinstance(place, _partition_place)
        place._partition = partition
        if partition is not None:
            place._stream_key = partition.key
        place._backing = backing
        place._label = label
        place._native_context = native_context
        return place

    @classmethod
    def _bind(cls, partition: StreamPartition, backing: Any, label: str,
              native_context: int = 0) -> _partition_place:
        return cls._new(partition.device, partition, backing, label, native_context)

    @property
    def backing_context(self) -> Any:
        return self._backing

    def __enter__(self) -> exec_place:
        super().__enter__()
        if self._native_context:            # CUDA: make the partition's context current
            from ..backends import _cuda_green
            _cuda_green.set_current(self._native_context)
        return self

    def __repr__(self) -> str:
        return f"exec_place({self._label})"


class _green_data_place(data_place):
    """The memory of a green context: the device's memory, labelled."""

    __slots__ = ("_view",)
    _view: green_ctx_view

    @property
    def kind(self) -> str:
        return f"green_ctx(dev={self._device}, ctx={self._view._index})"

    def __repr__(self) -> str:
        return f"data_place({self.kind!r})"


def green_data_place(view: Any) -> data_place:
    """``data_place.green_ctx(view)``."""
    if not isinstance(view, green_ctx_view):
        raise TypeError(f"data_place.green_ctx expects a green_ctx_view, got "
                        f"{type(view).__name__}")
    place = _green_data_place._make(view._helper._device)
    assert isinstance(place, _green_data_place)
    place._view = view
    return place


def green_exec_place(view: Any, use_green_ctx_data_place: bool = False) -> exec_place:
    """``exec_place.green_ctx(view, use_green_ctx_data_place)``."""
    if not isinstance(view, green_ctx_view):
        raise TypeError(f"exec_place.green_ctx expects a green_ctx_view, got "
                        f"{type(view).__name__}")
    partition = view._partition
    native = partition.native
    context = 0 if native is None else native.context
    place = _partition_place._bind(partition, None, partition.label, context)
    place._backing = view                   # keeps the helper (and its contexts) alive
    if use_green_ctx_data_place:
        place._affine = green_data_place(view)
    return place


_context_partitions: weakref.WeakValueDictionary[int, StreamPartition] = \
    weakref.WeakValueDictionary()
"""The partition of each foreign CUDA context (``CUcontext`` value) that a live place
names."""


def place_from_context(ctx: Any, dev_id: int = -1) -> exec_place:
    """``exec_place.from_context(ctx, dev_id)`` (see the module docstring)."""
    if ctx is None or isinstance(ctx, (bool, str, bytes, float)):
        raise TypeError(f"exec_place.from_context expects a CUcontext (int) or an object "
                        f"with .handle (a cuda.core Context), got {type(ctx).__name__}")
    handle_source = ctx.handle if hasattr(ctx, "handle") else ctx
    try:
        handle = int(handle_source)
    except (TypeError, ValueError):
        raise TypeError(f"exec_place.from_context expects a CUcontext (int) or an object "
                        f"with .handle (a cuda.core Context), got {type(ctx).__name__}"
                        ) from None
    if handle == 0:
        raise ValueError("exec_place.from_context: the context handle is NULL (0); pass "
                         "a live CUcontext or cuda.core Context")
    if isinstance(dev_id, bool) or not isinstance(dev_id, int):
        raise TypeError(f"dev_id must be an int, got {type(dev_id).__name__}")
    if dev_id < -1:
        raise PlaceError(f"exec_place.from_context: device {dev_id} does not exist; "
                         "give an ordinal, or -1 to derive it from the context")
    backend = _default_backend()
    if backend.cuda_contexts:
        from ..backends import _cuda_green
        device, primary = _cuda_green.context_device(handle)
        if dev_id != -1 and dev_id != device:
            raise PlaceError(f"exec_place.from_context: the context belongs to device "
                             f"{device}, not {dev_id}; pass dev_id={device} or -1")
        if primary:                         # the device's own context: a device place
            return _partition_place._new(device, None, ctx, f"device={device}")
        # One partition per context: places of the same context share its streams.
        partition = _context_partitions.get(handle)
        if partition is None:
            partition = StreamPartition(device, _cuda_green.ContextPartition(ctx, handle),
                                        f"context(dev={device}, 0x{handle:x})")
            _context_partitions[handle] = partition
        return _partition_place._bind(partition, ctx, partition.label, handle)
    emulated = _emulated_contexts.get(handle)
    if emulated is None:
        raise PlaceError(
            f"exec_place.from_context: 0x{handle:x} is not a context of the "
            f"{backend.name} backend; there, pass a backing_context of a green place "
            "(green_places(...)[i].backing_context) or its .handle")
    check_device_ordinal(emulated.device_id, "exec_place.from_context",
                         backend.device_count)
    if dev_id != -1 and dev_id != emulated.device_id:
        raise PlaceError(f"exec_place.from_context: the context belongs to device "
                         f"{emulated.device_id}, not {dev_id}; pass "
                         f"dev_id={emulated.device_id} or -1")
    return _partition_place._bind(emulated.partition, ctx, emulated.partition.label)


def green_places(sms_per_place: int, n_places: int | None = None, device_id: int = 0,
                 coscheduled_sm_count: int = 0) -> list[exec_place]:
    """Partition a device's SMs into green contexts, one execution place each.

    Parameters
    ----------
    sms_per_place : int
        SMs per place (rounded up to the device's minimum partition size).
    n_places : int, optional
        How many places; ``None``: as many as fit.
    device_id : int
        The device to partition.
    coscheduled_sm_count : int
        Co-scheduling constraint applied to every group (CUDA 13.1 structured split).

    Returns
    -------
    list of exec_place
        ``exec_place.from_context(ctx)`` for each green context ``ctx``, which the
        place keeps alive and returns as ``backing_context``.

    Raises
    ------
    ValueError
        ``sms_per_place`` or ``n_places`` not positive.
    PlaceError
        Bad ``device_id``.
    RuntimeError
        Fewer groups than ``n_places`` fit.
    BackendUnavailableError
        CUDA backend without ``cuda.core`` 1.0, which green contexts need (the
        reference raises ``RuntimeError``).

    Notes
    -----
    The caller's current CUDA context is restored on return (a failure to restore
    is raised only when nothing else is propagating).
    """
    sms_per_place = _check_positive(sms_per_place, "sms_per_place")
    if n_places is not None:
        n_places = _check_positive(n_places, "n_places")
    if isinstance(coscheduled_sm_count, bool) or not isinstance(coscheduled_sm_count, int):
        raise TypeError(f"coscheduled_sm_count must be an int, got "
                        f"{type(coscheduled_sm_count).__name__}")
    if coscheduled_sm_count < 0:
        raise ValueError(f"coscheduled_sm_count must be 0 or more, got "
                         f"{coscheduled_sm_count}")
    backend, device = _checked_device(device_id, "green_places")
    if backend.cuda_contexts:
        from ..backends import _cuda_green
        contexts = _cuda_green.split_device(device, sms_per_place, n_places,
                                            coscheduled_sm_count)
        return [place_from_context(ctx, device) for ctx, _ in contexts]
    sizes = _emulated_split(device, max(sms_per_place, coscheduled_sm_count), n_places)
    return [place_from_context(EmulatedContext(device, sms, i), device)
            for i, sms in enumerate(sizes)]
