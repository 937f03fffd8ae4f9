"""``DeviceArray``: memory on a data place, exported through CAI / array interface and
DLPack.

A :class:`DeviceArray` owns ``prod(shape) * itemsize`` bytes allocated through the
backend of the newest context (else the default backend) on a ``data_place``. It is
C-contiguous, of any shape and any fixed-size NumPy dtype.

Protocols
    On the CUDA backend the array speaks the CUDA Array Interface v3 (borrowed: the
    consumer must keep the array alive) and DLPack with CUDA devices. On the emulated
    backend it speaks ``__array_interface__`` and CPU DLPack instead, and has no
    ``__cuda_array_interface__`` attribute at all, so ``hasattr`` checks fail
    cleanly. ``DeviceArray(...)`` builds the subclass that fits the backend;
    ``isinstance(a, DeviceArray)`` holds for both.

DLPack capsules
    The emulated backend's arrays export NumPy's capsule of an array over their
    memory (``ndarray.__dlpack__``); the CUDA backend's use stflow's exporter
    (``stflow._interchange.dlpack``), which no library replaces (see there).

Ownership
    The memory is freed exactly once, on the allocation stream, when the array, its
    slices and every DLPack consumer are gone (a ``weakref.finalize`` of the root
    array; DLPack capsules hold a strong reference to the exporting array until the
    consumer's deleter runs). A failure to free becomes a ``RuntimeWarning``.

Streams
    ``stream`` (any stream-like) orders the allocation, the free and the copies.
    Without one, the allocation is synchronous (usable from every stream), the copies
    run on the legacy default stream and the free on the backend's own stream.
    ``copy_to_host`` and ``copy_to_device`` block until their copy is complete. A
    DLPack consumer on another stream is made to wait (on the device) for an event
    recorded on the allocation stream.
"""

from __future__ import annotations

import math
import warnings
import weakref
from typing import Any

import numpy as np

from .._core.errors import DeviceOrdinalError, PlaceAllocationError
from .._places.places import data_place
from ..backends._base import HOST, MANAGED, Allocation, Backend, Stream
from .dlpack import CPU, CUDA, CUDA_HOST, CUDA_MANAGED, dtype_code, export_capsule
from .sources import check_dtype
from .views import stream_handle

__all__ = ["DeviceArray"]

_LEGACY = "legacy"
_PER_THREAD = "per-thread"


def _check_shape(size: Any) -> tuple[int, ...]:
    """The shape of a new array: ``(size,)`` for an ``int``, else the given extents."""
    if isinstance(size, int) and not isinstance(size, bool):
        extents: tuple[Any, ...] = (size,)
    elif isinstance(size, (tuple, list)):
        extents = tuple(size)
    else:
        raise TypeError(
            f"DeviceArray: size must be an int (or a shape tuple of ints), "
            f"got {type(size).__name__}"
        )
    for extent in extents:
        if isinstance(extent, bool) or not isinstance(extent, int):
            raise TypeError(
                f"DeviceArray: extents must be ints, got "
                f"{type(extent).__name__} in {size!r}"
            )
        if extent < 0:
            raise ValueError(f"DeviceArray size must be non-negative, got {size!r}")
    return extents


def _stream_key(handle: int) -> Any:
    """What identifies a stream for the handshake: the legacy default stream has two
    handles (0 and 1)."""
    if handle in (0, 1):
        return _LEGACY
    if handle == 2:
        return _PER_THREAD
    return handle


def _free(
    backend: Backend,
    allocation: Allocation,
    stream: Stream | None,
    stream_owner: Any,
    description: str,
) -> None:
    """The finalizer of a root array: free its memory, warn on failure (the
    reference only prints it).

    ``stream_owner`` (the user's stream object) is kept alive until then, so the free
    is never enqueued on a destroyed stream.
    """
    try:
        backend.free_from_finalizer(allocation, stream)
    except BaseException as exc:  # noqa: BLE001 - nobody can catch it here
        warnings.warn(
            f"stflow: freeing the memory of {description} failed: {exc!r}",
            RuntimeWarning,
            stacklevel=2,
        )


class DeviceArray:
    """A C-contiguous buffer on a data place.

    Parameters
    ----------
    size : int or tuple of int
        Number of elements, as in the reference (``DeviceArray(size=n, ...)`` works).
        stflow also accepts a C-order shape tuple with any number of axes (a
        documented superset: the reference's array is 1-D only).
    dtype : dtype-like
        Any fixed-size NumPy dtype.
    dplace : data_place
        ``host()``, ``managed()`` or ``device(n)``.
    stream : stream-like, optional
        Orders the allocation, copies and the free (``None``: a synchronous
        allocation, copies on the legacy default stream). Kept alive until the memory
        is freed.

    Raises
    ------
    TypeError
        A size or extent that is not an ``int``, a dtype without fixed size, a
        ``dplace`` that is not a ``data_place``, a bad stream.
    ValueError
        A negative size ("DeviceArray size must be non-negative").
    PlaceError
        A place that cannot allocate (``affine()``) or a device that does not exist.

    Notes
    -----
    Zero-size arrays allocate nothing and have pointer ``0``. The memory is freed, on
    the allocation stream, once the array, its slices and every DLPack consumer are
    gone; a failure then becomes a ``RuntimeWarning``. The CUDA Array Interface
    (``__array_interface__`` on the emulated backend) borrows: consumers must keep
    the array alive, as NumPy does.
    """

    __slots__ = (
        "_ptr",
        "_shape",
        "_dtype",
        "_place",
        "_stream",
        "_stream_owner",
        "_backend",
        "_root",
        "_finalizer",
        "_device",
        "__weakref__",
    )
    _ptr: int
    _shape: tuple[int, ...]
    _dtype: np.dtype
    _place: data_place
    _stream: Stream
    _stream_owner: Any
    _backend: Backend
    _root: DeviceArray | None
    _finalizer: Any
    _device: tuple[int, int]

    def __new__(
        cls, size: Any = None, dtype: Any = None, dplace: Any = None, stream: Any = None
    ) -> DeviceArray:
        if cls is DeviceArray:
            from ..backends import default_backend

            cls = (
                _CudaDeviceArray
                if default_backend(notify=False).gpu_memory
                else _HostDeviceArray
            )
        return object.__new__(cls)

    def __init__(
        self, size: Any, dtype: Any, dplace: data_place, stream: Any = None
    ) -> None:
        from ..backends import default_backend

        shape = _check_shape(size)
        checked = check_dtype(dtype, "DeviceArray")
        if not isinstance(dplace, data_place):
            raise TypeError(
                f"DeviceArray: dplace must be a data_place, got {type(dplace).__name__}"
            )
        backend = default_backend(notify=False)
        device = dplace.device_id
        if device < MANAGED:
            raise PlaceAllocationError(
                f"DeviceArray: data_place.allocate failed: {dplace!r} cannot allocate "
                "memory; use data_place.host(), .managed() or .device(n)"
            )
        if device >= backend.device_count:
            raise DeviceOrdinalError(
                f"DeviceArray: invalid device id {device}: device {device} does not "
                f"exist on the {backend.name} backend ({backend.device_count} "
                "device(s))"
            )
        native = backend.stream_from_handle(stream_handle(stream))
        nbytes = math.prod(shape) * checked.itemsize
        self._shape = shape
        self._dtype = checked
        self._place = dplace
        self._stream = native
        self._stream_owner = stream
        self._backend = backend
        self._root = None
        self._device = self._dlpack_device_of(device, backend)
        self._finalizer = None
        self._ptr = 0
        if nbytes:
            # No stream given: allocate synchronously (usable from every stream) and
            # free on the backend's own stream for the place.
            ordered = None if stream is None else native
            allocation = backend.allocate(device, nbytes, ordered, checked)
            self._ptr = allocation.ptr
            self._finalizer = weakref.finalize(
                self,
                _free,
                backend,
                allocation,
                ordered,
                stream,
                f"a DeviceArray of {nbytes} bytes at {dplace.kind}",
            )
            self._finalizer.atexit = False

    @staticmethod
    def _dlpack_device_of(device: int, backend: Backend) -> tuple[int, int]:
        raise NotImplementedError

    @classmethod
    def _view(cls, root: DeviceArray, ptr: int, shape: tuple[int, ...]) -> DeviceArray:
        view = object.__new__(cls)
        view._ptr = ptr
        view._shape = shape
        view._dtype = root._dtype
        view._place = root._place
        view._stream = root._stream
        view._stream_owner = root._stream_owner
        view._backend = root._backend
        view._root = root
        view._finalizer = None
        view._device = root._device
        return view

    @staticmethod
    def from_host(host_array: Any, dplace: data_place, stream: Any = None) -> DeviceArray:
        """A new array on ``dplace`` holding a contiguous copy of ``host_array``.

        Parameters
        ----------
        host_array : array-like
            The values; made C-contiguous first. Any number of axes: the new array
            keeps the shape (a deliberate superset: the reference accepts only 1-D
            arrays and raises ``ValueError`` otherwise).
        dplace : data_place
            Where the new array lives.
        stream : stream-like, optional
            As for :class:`DeviceArray`.

        Notes
        -----
        The copy is made on the allocation stream and is complete when this returns.
        """
        source = np.ascontiguousarray(host_array)
        array = DeviceArray(tuple(source.shape), source.dtype, dplace, stream)
        array.copy_to_device(source)
        return array

    # -- properties --------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self._shape)

    @property
    def nbytes(self) -> int:
        return self.size * self._dtype.itemsize

    @property
    def data_place(self) -> data_place:
        return self._place

    @property
    def ptr(self) -> int:
        """Address of the first element (``0`` for an empty array)."""
        return self._ptr

    @property
    def _finalizer_ref(self) -> Any:
        """The reference's private name of the ``weakref.finalize`` that frees the
        memory (tests written for it read ``.alive``); ``None`` for views and empty
        arrays."""
        return self._finalizer

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d DeviceArray")
        return self._shape[0]

    # -- slicing -----------------------------------------------------------------
    def __getitem__(self, key: Any) -> DeviceArray:
        """A non-owning view of a contiguous slice (along the first axis).

        Raises
        ------
        TypeError
            ``key`` is not a slice.
        IndexError
            A step other than 1, or a 0-d array.
        """
        if not isinstance(key, slice):
            raise TypeError(
                f"DeviceArray indices must be slices such as a[2:5], got "
                f"{type(key).__name__}"
            )
        if key.step not in (None, 1):
            raise IndexError(
                f"DeviceArray slices must be contiguous (step 1), got step {key.step}"
            )
        if not self._shape:
            raise IndexError("a 0-d DeviceArray cannot be sliced")
        start, stop, _ = key.indices(self._shape[0])
        stop = max(stop, start)
        row = math.prod(self._shape[1:]) * self._dtype.itemsize
        ptr = self._ptr + start * row if stop > start else 0
        return type(self)._view(self._root or self, ptr, (stop - start, *self._shape[1:]))

    # -- copies ------------------------------------------------------------------
    def _copy(self, dst: int, src: int) -> None:
        backend = self._backend
        backend.copy(dst, src, self.nbytes, self._stream)
        backend.synchronize(backend.record(self._stream))

    def copy_to_host(self) -> np.ndarray:
        """A new host array holding the contents (copied on the allocation stream).

        Blocks until the copy is complete. A driver failure raises ``CudaError``.
        """
        result: np.ndarray = np.empty(self._shape, self._dtype)
        if self.nbytes:
            self._copy(int(result.__array_interface__["data"][0]), self._ptr)
        return result

    def copy_to_device(self, host_array: Any) -> None:
        """Overwrite the contents with ``host_array`` (any shape, same byte count).

        Raises
        ------
        TypeError
            The values cannot be converted under NumPy's ``same_kind`` casting (the
            reference casts silently).
        ValueError
            The converted data has a different number of bytes.

        Notes
        -----
        Copies on the allocation stream and blocks until the copy is complete.
        """
        source = np.asarray(host_array)
        if source.dtype != self._dtype:
            if not np.can_cast(source.dtype, self._dtype, "same_kind"):
                raise TypeError(
                    f"copy_to_device: cannot convert {source.dtype} to "
                    f"{self._dtype} under 'same_kind' casting; convert "
                    "explicitly (host_array.astype(...)) if that is meant"
                )
            source = source.astype(self._dtype, casting="same_kind")
        source = np.ascontiguousarray(source)
        if source.nbytes != self.nbytes:
            raise ValueError(
                f"copy_to_device: {source.nbytes} bytes given for an array "
                f"of {self.nbytes} bytes (shape {self._shape}, "
                f"{self._dtype})"
            )
        if self.nbytes:
            self._copy(self._ptr, int(source.__array_interface__["data"][0]))

    # -- DLPack --------------------------------------------------------------------
    def __dlpack_device__(self) -> tuple[int, int]:
        """``(2, n)`` device memory, ``(3, 0)`` host, ``(13, n)`` managed (the
        reference says a CUDA device for all three); ``(1, 0)`` on the emulated
        backend."""
        return self._device

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: Any = None,
        dl_device: Any = None,
        copy: Any = None,
    ) -> Any:
        """A DLPack capsule of the memory (zero-copy), keeping this array alive.

        Parameters
        ----------
        stream : int or None
            The consumer's stream: ``-1`` no synchronisation, ``None`` or ``1`` the
            legacy default stream, ``2`` the per-thread default stream, another
            ``int >= 0`` that stream.
        max_version : tuple of int, optional
            ``(1, 0)`` or more gives a versioned ``"dltensor_versioned"`` capsule,
            otherwise an unversioned ``"dltensor"`` one (the reference ignores it).
        dl_device : tuple, optional
            Must equal ``__dlpack_device__()``.
        copy : bool, optional
            A truthy value is refused: the export is zero-copy only.

        Raises
        ------
        BufferError
            ``copy`` is truthy, ``dl_device`` differs, or the dtype has no DLPack
            type (structured, or a kind other than ``i u f c b``).
        ValueError
            A negative stream other than ``-1``.
        TypeError
            A stream that is not an ``int``.

        Notes
        -----
        When the consumer stream differs from the allocation stream and the array is
        not empty, the consumer stream waits (on the device) for an event recorded on
        the allocation stream; the host never blocks.
        """
        if copy:
            raise BufferError(
                "DeviceArray exports zero-copy only; copy=True is not "
                "supported (copy_to_host() makes a host copy)"
            )
        if dl_device is not None:
            try:
                wanted = (int(dl_device[0]), int(dl_device[1]))
            except (TypeError, ValueError, IndexError) as exc:
                raise BufferError(
                    f"dl_device must be a (device_type, device_id) pair, "
                    f"got {dl_device!r}"
                ) from exc
            if wanted != self._device:
                raise BufferError(
                    f"the array lives on DLPack device {self._device}; "
                    f"it cannot be exported to {wanted} without a copy"
                )
        code = dtype_code(self._dtype)
        if code is None:
            kind = "structured dtype" if self._dtype.fields is not None else "dtype"
            raise BufferError(
                f"{kind} {self._dtype} has no DLPack equivalent (only "
                "bool, integer, floating and complex types do; the CUDA "
                "Array Interface describes structured types)"
            )
        versioned = _wants_versioned(max_version)
        self._handshake(stream)
        return self._capsule(code, versioned)

    def _capsule(self, code: tuple[int, int], versioned: bool) -> Any:
        """The capsule of the memory, owning this array (the arguments checked):
        stflow's exporter, which says ``(13, n)`` for managed memory."""
        return export_capsule(
            self,
            self._ptr,
            self._shape,
            code[0],
            code[1],
            self._device[0],
            self._device[1],
            versioned,
        )

    def _handshake(self, stream: Any) -> None:
        if stream is None:
            stream = 1
        if isinstance(stream, bool) or not isinstance(stream, int):
            raise TypeError(
                f"__dlpack__: stream must be an int or None, got {type(stream).__name__}"
            )
        if stream == -1:
            return
        if stream < 0:
            raise ValueError(
                f"__dlpack__: stream {stream} is not valid; use -1 (no "
                "synchronisation), None, 1, 2 or a stream handle"
            )
        if not self.nbytes:
            return
        key = _stream_key(stream)
        if key == _stream_key(self._stream.handle):
            return
        backend = self._backend
        if key == _LEGACY or (key == _PER_THREAD and not backend.gpu_memory):
            stream = 0  # the emulated backend has one default stream
        consumer = backend.stream_from_handle(stream)
        if consumer is self._stream:
            return
        backend.wait(consumer, backend.record(self._stream))

    # -- misc --------------------------------------------------------------------
    def _interface(self) -> dict[str, Any]:
        interface: dict[str, Any] = {
            "version": 3,
            "shape": self._shape,
            "typestr": self._dtype.str,
            "data": (self._ptr, False),
            "strides": None,
        }
        if self._dtype.fields is not None:
            interface["descr"] = self._dtype.descr
        return interface

    def __repr__(self) -> str:
        extent = (
            f"size={self._shape[0]}" if len(self._shape) == 1 else f"shape={self._shape}"
        )
        return (
            f"DeviceArray({extent}, dtype={self._dtype}, ptr=0x{self._ptr:x}, "
            f"place={self._place.kind})"
        )


def _wants_versioned(max_version: Any) -> bool:
    if max_version is None:
        return False
    try:
        if not isinstance(max_version, (tuple, list)):
            raise TypeError(type(max_version).__name__)
        major = int(max_version[0])
    except (TypeError, ValueError, IndexError) as exc:
        raise TypeError(
            f"max_version must be a (major, minor) tuple, got {max_version!r}"
        ) from exc
    return major >= 1


class _CudaDeviceArray(DeviceArray):
    """A ``DeviceArray`` of the CUDA backend: CUDA Array Interface and CUDA DLPack."""

    __slots__ = ()

    @staticmethod
    def _dlpack_device_of(device: int, backend: Backend) -> tuple[int, int]:
        if device == HOST:
            return (CUDA_HOST, 0)
        if device == MANAGED:
            return (CUDA_MANAGED, max(backend.current_device(), 0))
        return (CUDA, device)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """CUDA Array Interface v3; ``stream`` is the allocation stream, if one was
        given. The consumer borrows the memory."""
        interface = self._interface()
        handle = self._stream.handle if self._stream_owner is not None else None
        interface["stream"] = None if handle is None else (handle or 1)
        return interface


class _HostDeviceArray(DeviceArray):
    """A ``DeviceArray`` of the emulated backend: ``__array_interface__`` and CPU
    DLPack (no ``__cuda_array_interface__``)."""

    __slots__ = ()

    @staticmethod
    def _dlpack_device_of(device: int, backend: Backend) -> tuple[int, int]:
        return (CPU, 0)

    def _capsule(self, code: tuple[int, int], versioned: bool) -> Any:
        """NumPy's capsule of an array over the emulated memory. The array's base is
        this ``DeviceArray`` (NumPy keeps the object whose ``__array_interface__``
        it read), so the capsule owns this array until the consumer releases it."""
        values = np.asarray(self)
        if values.base is not self:  # not NumPy's documented behaviour: ours
            return super()._capsule(code, versioned)
        return values.__dlpack__(max_version=(1, 0) if versioned else None)

    @property
    def __array_interface__(self) -> dict[str, Any]:
        """NumPy's array interface v3 over the emulated memory (borrowed)."""
        interface = self._interface()
        interface.setdefault("descr", self._dtype.descr)
        return interface
