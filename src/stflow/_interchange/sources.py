"""Turning user buffers into (address, shape, dtype, strides) descriptions.

The interfaces are tried in the order of the API: the CUDA Array Interface v3, the
buffer protocol (NumPy arrays always take this path), then DLPack. A buffer need not
be C-contiguous: positive strides whose elements do not overlap describe a *strided*
buffer (``stflow._core.layout``), registered where it is.

Who reads what
    NumPy reads the buffer protocol, the array interface and CPU DLPack producers
    (``numpy.from_dlpack``). CUDA DLPack producers are read by ``cuda.core``'s
    ``StridedMemoryView.from_dlpack`` where ``cuda.core`` is installed (the CUDA
    backend only; it takes the capsule over and releases it when the view is
    collected, so the view is kept with the producer while the data is registered),
    else by ``stflow._interchange.dlpack.read_capsule``.

What stays here, and why
    The CUDA Array Interface, a dict of a few fields, is read here. ``cuda.core``'s
    reader (``from_cuda_array_interface``) refuses version 2, which PyTorch still
    exports; takes the dtype from ``typestr`` alone (a structured dtype given by
    ``descr`` arrives as ``|V8``); divides byte strides by the item size; answers a
    mask or stream 0 without saying what to pass; and asks the driver for the device,
    which the emulated backend must do without to refuse GPU buffers with its own
    error.

    ``cuda.core`` is used only when its ``from_dlpack`` exists and adds the tensor's
    ``byte_offset`` to ``data`` (checked once on a CPU capsule,
    :func:`strided_memory_view`): releases that have only the constructor, or whose
    ``from_dlpack`` drops the offset, would give a wrong pointer for producers that
    set one.

Streams
    A CUDA DLPack producer is asked for its capsule with ``stream=`` one of stflow's
    streams (never 0, which DLPack forbids for CUDA: the legacy default stream is 1):
    the producer makes that stream wait for its pending work, and the runtime records
    an event on it that every use of the data waits for. A CAI export of version 2
    cannot say on which stream its data is pending; when its object also exports
    DLPack (PyTorch), it is read through DLPack on the CUDA backend for that
    handshake.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._core.errors import ShapeError
from .._core.layout import check_strides, extent
from .dlpack import (
    CPU,
    CUDA,
    CUDA_HOST,
    CUDA_MANAGED,
    DLPackTensor,
    export_capsule,
    read_capsule,
    request_capsule,
)

__all__ = ["Source", "describe_buffer", "check_dtype", "strided_memory_view"]


@dataclass
class Source:
    """A user buffer, described."""

    ptr: int
    shape: tuple[int, ...]
    dtype: np.dtype
    readonly: bool
    interface: str
    """``"cai"``, ``"buffer"`` or ``"dlpack"``."""
    keepalive: Any
    """What must stay alive while the data is registered (the buffer export)."""
    stream: int | None = None
    """CAI ``stream`` field: work the producer still has in flight."""
    dlpack_device: tuple[int, int] | None = None
    ordered_on: Any = None
    """The runtime stream a DLPack producer ordered its pending work on."""
    strides: tuple[int, ...] | None = None
    """Byte strides of a buffer that is not C-contiguous (``None``: it is)."""

    @property
    def nbytes(self) -> int:
        """The bytes of the elements."""
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def extent(self) -> int:
        """The bytes from the first element to one past the last."""
        return extent(self.shape, self.strides, self.dtype.itemsize)


def check_dtype(dtype: Any, what: str) -> np.dtype:
    """Return ``numpy.dtype(dtype)``, refusing types without a fixed byte layout."""
    try:
        result = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"{what}: {dtype!r} is not a NumPy dtype") from exc
    if result.hasobject or result.itemsize == 0:
        raise TypeError(
            f"{what}: dtype {result} has no fixed-size byte layout; stflow moves raw "
            "bytes between places, so use a numeric, boolean or fixed-size structured "
            "dtype"
        )
    return result


def _from_cai(buf: Any, interface: dict) -> Source:
    if not isinstance(interface, dict):
        raise TypeError(f"{type(buf).__name__}.__cuda_array_interface__ is not a dict")
    shape = tuple(interface.get("shape", ()))
    if any((not isinstance(n, int)) or n < 0 for n in shape):
        raise ShapeError(
            f"CUDA Array Interface shape dimensions must be non-negative "
            f"integers, got shape {shape}"
        )
    typestr = interface["typestr"]
    descr = interface.get("descr")
    if typestr.startswith("|V") and descr:
        dtype = np.dtype([tuple(field) for field in descr])
    else:
        dtype = np.dtype(typestr)
    dtype = check_dtype(dtype, "logical_data")
    if interface.get("mask") is not None:
        raise ShapeError(
            "masked CUDA arrays are not supported; pass the unmasked data "
            "(the CUDA Array Interface 'mask' field must be None)"
        )
    strides = interface.get("strides")
    if strides is not None:
        strides = tuple(strides)
        if len(strides) != len(shape):
            raise ShapeError(
                f"CUDA Array Interface strides must match the number of "
                f"dimensions: strides {strides} for shape {shape}"
            )
        strides = check_strides(
            shape,
            strides,
            dtype.itemsize,
            f"the {type(buf).__name__} (CUDA Array Interface)",
        )
    stream = interface.get("stream")
    if stream == 0:
        raise ValueError(
            "CUDA Array Interface v3 forbids stream 0 (0 is disallowed); "
            "the producer must give None, 1, 2 or a stream handle"
        )
    ptr, readonly = interface["data"]
    return Source(
        int(ptr or 0), shape, dtype, bool(readonly), "cai", buf, stream, strides=strides
    )


def _unordered(interface: Any) -> bool:
    """A CUDA Array Interface of version 2 or older: it has no ``stream`` to tell
    which work on the data is pending."""
    if not isinstance(interface, dict):
        return False
    version = interface.get("version", 0)
    return isinstance(version, int) and version < 3


def _from_buffer(buf: Any, view: memoryview) -> Source:
    try:
        array = np.asarray(view)
    except (TypeError, ValueError, NotImplementedError) as exc:
        raise TypeError(
            f"the buffer format {view.format!r} of "
            f"{type(buf).__name__} has no NumPy dtype"
        ) from exc
    dtype = check_dtype(array.dtype, "logical_data")
    return Source(
        _lowest_address(array),
        tuple(array.shape),
        dtype,
        bool(view.readonly),
        "buffer",
        (view, array),
        strides=_array_strides(buf, array, dtype),
    )


def _from_array_interface(buf: Any) -> Source:
    array = np.asarray(buf)
    dtype = check_dtype(array.dtype, "logical_data")
    return Source(
        _lowest_address(array),
        tuple(array.shape),
        dtype,
        not array.flags.writeable,
        "buffer",
        (buf, array),
        strides=_array_strides(buf, array, dtype),
    )


def _array_strides(
    buf: Any, array: np.ndarray, dtype: np.dtype
) -> tuple[int, ...] | None:
    """The strides of a host array that is not C-contiguous (checked)."""
    if array.flags.c_contiguous:
        return None
    return check_strides(
        array.shape,
        array.strides,
        dtype.itemsize,
        f"the {type(buf).__name__} of shape {array.shape}",
    )


def _lowest_address(array: np.ndarray) -> int:
    """The address of the first element (the lowest, strides being positive)."""
    return int(array.__array_interface__["data"][0])


def _from_dlpack(
    buf: Any, producer_stream: Callable[[tuple[int, int]], Any] | None
) -> Source:
    device = tuple(buf.__dlpack_device__())
    if device[0] != 1:  # not the CPU: only the CUDA backend can read it
        location = (int(device[0]), int(device[1]))
        stream = None if producer_stream is None else producer_stream(location)
        if stream is None:  # the runtime refuses GPU memory on the emulated backend
            return Source(
                0, (), np.dtype(np.uint8), False, "dlpack", buf, dlpack_device=location
            )
        return _from_gpu_dlpack(buf, location, stream)
    try:
        array = np.from_dlpack(buf)
    except BufferError as exc:
        raise ShapeError(
            f"cannot import {type(buf).__name__} through DLPack: {exc}"
        ) from exc
    dtype = check_dtype(array.dtype, "logical_data")
    return Source(
        _lowest_address(array),
        tuple(array.shape),
        dtype,
        not array.flags.writeable,
        "dlpack",
        (buf, array),
        dlpack_device=(1, 0),
        strides=_array_strides(buf, array, dtype),
    )


def _from_gpu_dlpack(buf: Any, device: tuple[int, int], stream: Any) -> Source:
    """Read a CUDA producer's tensor; its pending work is ordered on ``stream``.

    The source keeps the producer and what owns the tensor (the ``cuda.core`` view,
    or the unconsumed capsule) alive while the data is registered: the pointer is the
    producer's own memory, and it is released only when stflow drops both.
    """
    if device[0] not in (CUDA, CUDA_HOST, CUDA_MANAGED):
        raise TypeError(
            f"cannot register a {type(buf).__name__} on DLPack device "
            f"{device}: stflow reads CPU and CUDA memory only"
        )
    handle = int(stream.handle) or 1  # DLPack: 0 is not a CUDA stream
    view_type = strided_memory_view()
    tensor: DLPackTensor
    if view_type is None:
        owner: Any = request_capsule(buf, handle)
        tensor = read_capsule(owner)
    else:
        owner = _view_with_cuda_core(view_type, buf, handle)
        tensor = _tensor_of_view(owner, buf, device)
    dtype = check_dtype(tensor.dtype, "logical_data")
    strides = None
    if tensor.strides is not None:  # DLPack strides count elements
        strides = check_strides(
            tensor.shape,
            tuple(s * dtype.itemsize for s in tensor.strides),
            dtype.itemsize,
            f"the DLPack tensor of {type(buf).__name__}",
        )
    return Source(
        tensor.ptr,
        tensor.shape,
        dtype,
        tensor.readonly,
        "dlpack",
        (buf, owner),
        dlpack_device=device,
        ordered_on=stream,
        strides=strides,
    )


def _view_with_cuda_core(view_type: Any, buf: Any, handle: int) -> Any:
    """``cuda.core``'s view of a CUDA producer, asked for ``stream=handle``."""
    try:
        return view_type.from_dlpack(buf, stream_ptr=handle)
    except (AssertionError, BufferError, NotImplementedError, ValueError) as exc:
        raise TypeError(_refusal(buf, exc)) from exc  # AssertionError: not a capsule


def _tensor_of_view(view: Any, buf: Any, device: tuple[int, int]) -> DLPackTensor:
    """What a ``StridedMemoryView`` describes, as :class:`DLPackTensor`."""
    try:
        dtype = np.dtype(view.dtype)
    except (NotImplementedError, TypeError, ValueError) as exc:
        raise TypeError(_refusal(buf, exc)) from exc
    shape = tuple(int(n) for n in view.shape)
    strides = None if view.strides is None else tuple(int(s) for s in view.strides)
    return DLPackTensor(int(view.ptr), shape, strides, dtype, device, bool(view.readonly))


def _refusal(buf: Any, exc: BaseException) -> str:
    reason = str(exc) or f"{type(exc).__name__} in cuda.core"
    return (
        f"cannot import {type(buf).__name__} through DLPack: {reason}; pass a "
        "tensor of a NumPy dtype (convert bfloat16 and vector types, e.g. to "
        "float32) whose __dlpack__ returns a DLPack capsule"
    )


class _OneCapsule:
    """A DLPack producer on the CPU that hands out one prepared capsule."""

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (CPU, 0)


_UNKNOWN = object()
_view_type: Any = _UNKNOWN


def strided_memory_view() -> Any:
    """``cuda.core``'s ``StridedMemoryView`` when it can read CUDA producers for
    stflow, else ``None`` (decided once per process).

    It must import (``cuda.core.utils``, or ``cuda.core.experimental.utils`` in
    older releases), have ``from_dlpack`` (the constructor that came before it is
    deprecated) and add ``byte_offset`` to the tensor's ``data``, which is checked on
    a capsule over host memory (no driver involved).
    """
    global _view_type
    if _view_type is _UNKNOWN:
        _view_type = _find_strided_memory_view()
    return _view_type


def _find_strided_memory_view() -> Any:
    try:
        from cuda.core.utils import StridedMemoryView
    except ImportError:
        try:
            from cuda.core.experimental.utils import StridedMemoryView
        except ImportError:
            return None
    if not hasattr(StridedMemoryView, "from_dlpack"):
        return None
    values = np.zeros(2, np.int64)
    capsule = export_capsule(
        values,
        int(values.ctypes.data),
        (1,),
        0,
        64,
        CPU,
        0,
        True,
        byte_offset=values.itemsize,
    )
    try:
        view = StridedMemoryView.from_dlpack(_OneCapsule(capsule), stream_ptr=-1)
        honoured = int(view.ptr) == int(values.ctypes.data) + values.itemsize
    except Exception:  # noqa: BLE001 - any failure: stflow reads capsules itself
        return None
    del view
    return StridedMemoryView if honoured else None


_PLAIN_SUBCLASSES = (np.memmap, np.recarray)
"""ndarray subclasses whose whole meaning is their bytes: registered as they are."""


def _check_subclass(buf: np.ndarray) -> None:
    """Refuse an ndarray subclass whose meaning would be lost in a task.

    Tasks see plain arrays of the bytes and the results are written back as bytes, so
    a mask, matrix semantics or units would be silently dropped.
    """
    if isinstance(buf, _PLAIN_SUBCLASSES):
        return
    if isinstance(buf, np.ma.MaskedArray):
        raise TypeError(
            "cannot register a numpy.ma.MaskedArray as logical data: tasks see plain "
            "arrays and the mask would be silently lost; register buf.filled(value) "
            "(a copy with masked elements replaced) or, to work on the underlying "
            "values and ignore the mask, buf.data (which shares memory)"
        )
    if isinstance(buf, np.matrix):
        raise TypeError(
            "cannot register a numpy.matrix as logical data: tasks see plain ndarrays, "
            "where * is elementwise; register numpy.asarray(buf) (which shares memory) "
            "and use @ for matrix products"
        )
    raise TypeError(
        f"cannot register a {type(buf).__module__}.{type(buf).__name__} (an ndarray "
        "subclass) as logical data: tasks see plain arrays of its bytes, so what the "
        "subclass adds (units, masks, metadata) would be silently lost; register "
        "numpy.asarray(buf), which shares memory, if the bytes are all that matters"
    )


def describe_buffer(
    buf: Any, producer_stream: Callable[[tuple[int, int]], Any] | None = None
) -> Source:
    """Describe ``buf`` through the first interface it supports.

    ``producer_stream(dlpack_device)`` gives the stream a DLPack producer in GPU
    memory is asked to order its pending work on (``None``: GPU memory is not
    usable, as on the emulated backend). With it, an object whose CUDA Array
    Interface is older than version 3 (no ``stream`` field) and that also exports
    DLPack is read through DLPack, whose handshake orders its pending work.

    Raises
    ------
    TypeError
        ``buf`` is ``None``, supports none of the interfaces, or is an ndarray
        subclass whose meaning would be lost (``numpy.ma.MaskedArray``,
        ``numpy.matrix``, ...; ``numpy.memmap`` and ``numpy.recarray`` are accepted).
    ShapeError
        The buffer's strides are negative, zero or overlapping, it is masked, or it
        has a bad shape.
    """
    if buf is None:
        raise TypeError(
            "logical_data(None): there is no buffer to register; use "
            "ctx.logical_data_empty(shape, dtype) for data without an "
            "initial value"
        )
    interface = getattr(buf, "__cuda_array_interface__", None)
    if interface is not None:
        if (
            producer_stream is not None
            and _unordered(interface)
            and hasattr(buf, "__dlpack__")
            and hasattr(buf, "__dlpack_device__")
        ):
            return _from_dlpack(buf, producer_stream)  # for the stream handshake
        return _from_cai(buf, interface)
    if isinstance(buf, np.ndarray):
        if type(buf) is not np.ndarray:
            _check_subclass(buf)
        # The array's own dtype: the buffer protocol cannot describe every fixed-size
        # dtype (datetime64, padded or void records).
        return _from_array_interface(buf)
    try:
        view = memoryview(buf)
    except (TypeError, ValueError):
        view = None
    if view is not None:
        return _from_buffer(buf, view)
    if hasattr(buf, "__array_interface__"):
        return _from_array_interface(buf)
    if hasattr(buf, "__dlpack__") and hasattr(buf, "__dlpack_device__"):
        return _from_dlpack(buf, producer_stream)
    raise TypeError(
        f"cannot register a {type(buf).__name__} as logical data: it exports neither "
        "the CUDA Array Interface, the buffer protocol nor DLPack; pass a NumPy array "
        "(numpy.asarray(obj)), a CuPy/PyTorch/Numba array, or use logical_data_empty"
    )
