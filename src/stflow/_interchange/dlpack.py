"""DLPack capsules in ``ctypes``: the exporter no library offers, and the reader for
hosts without a suitable ``cuda.core``.

Who does what (``stflow._interchange.sources`` and ``stflow._interchange.device_array`` choose)
    Importing CPU producers: ``numpy.from_dlpack``. Importing CUDA producers: ``cuda.core``'s
    ``StridedMemoryView.from_dlpack`` where ``cuda.core`` is installed and reads the
    tensor fully; :func:`read_capsule` here otherwise. Exporting the emulated backend's
    ``DeviceArray``: NumPy's ``ndarray.__dlpack__`` (a CPU capsule of the memory).

Why the exporter stays
    :func:`dlpack_export` (the reference's API) builds a capsule for any address,
    DLPack device type and ordinal, type code and bit width (bfloat16 included)
    without a driver: NumPy exports CPU memory of NumPy dtypes only, and ``cuda.core``
    exports a view of a ``Buffer`` it asks the driver about, says CUDA host for
    managed memory, and only in recent releases. The CUDA backend's ``DeviceArray``
    uses the same exporter, so one code path owns the lifetime rules below and its
    managed memory is ``(13, n)``.

Why the reader stays
    The CUDA backend needs ``cuda.bindings`` only; ``cuda.core`` is optional. Without
    it (or with a release whose ``from_dlpack`` reads ``data`` without
    ``byte_offset``, or that has only the deprecated constructor), CUDA producers are
    read here.

The ABI (``dlpack.h``, versions 0.x and 1.x) is declared with ``ctypes``; no compiled
code is involved.

Exporting (:func:`dlpack_export`)
    A capsule named ``"dltensor"`` (a ``DLManagedTensor``) or ``"dltensor_versioned"``
    (a ``DLManagedTensorVersioned``, DLPack 1.0) points at a structure that stflow
    keeps, together with a copy of the shape and a strong reference to the *owner* of
    the memory, in a registry keyed by the structure's address. Its ``deleter`` is a
    ``ctypes`` callback that removes that entry: the structure, the shape and the
    owner reference go away together. A consumer renames the capsule
    (``"used_dltensor"`` / ``"used_dltensor_versioned"``) and calls the deleter when
    it no longer needs the memory, from any thread (the callback takes the GIL). A
    capsule never consumed calls the deleter when it is collected.

    Limitation: the deleter and the capsule destructor are Python callbacks. If C
    code drops a capsule, or a consumer releases a tensor, while a Python exception is
    being raised at C level (rare: Python frames hold their locals until the exception
    is handled), the callback cannot preserve that exception; Python then reports a
    ``SystemError`` instead of it. The release itself still happens.

Importing (:func:`read_capsule`)
    The runtime asks a CUDA producer for a capsule, reads pointer (``data`` plus
    ``byte_offset``), shape, strides, dtype, device and the read-only flag from it,
    and keeps the capsule (unconsumed) and the producer alive while the data is
    registered: when both are dropped, the producer's own capsule destructor releases
    the tensor.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._core.errors import ShapeError

__all__ = [
    "CPU",
    "CUDA",
    "CUDA_HOST",
    "CUDA_MANAGED",
    "DLPackTensor",
    "dlpack_export",
    "dtype_code",
    "export_capsule",
    "numpy_dtype",
    "read_capsule",
    "request_capsule",
]

CPU, CUDA, CUDA_HOST, CUDA_MANAGED = 1, 2, 3, 13
"""DLPack device types used by stflow (``kDLCPU``, ``kDLCUDA``, ``kDLCUDAHost``,
``kDLCUDAManaged``)."""

_INT, _UINT, _FLOAT, _BFLOAT, _COMPLEX, _BOOL = 0, 1, 2, 4, 5, 6
_CODES = {
    _INT: "int",
    _UINT: "uint",
    _FLOAT: "float",
    _BFLOAT: "bfloat",
    _COMPLEX: "complex",
    _BOOL: "bool",
}
_KIND_CODES = {"i": _INT, "u": _UINT, "f": _FLOAT, "c": _COMPLEX, "b": _BOOL}
_CODE_KINDS = {code: kind for kind, code in _KIND_CODES.items()}
_READ_ONLY = 1
"""``DLPACK_FLAG_BITMASK_READ_ONLY``."""
_VERSION = (1, 0)
"""The DLPack version of the versioned capsules stflow exports."""


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
    ]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


# -- the C API of capsules (independent prototypes: ctypes.pythonapi stays untouched) ---
_api = ctypes.pythonapi
_capsule_new = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p
)(("PyCapsule_New", _api))
_capsule_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
    ("PyCapsule_GetName", _api)
)
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api)
)
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api)
)
_raw_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api)
)

# Capsule names must outlive the capsules: module-level bytes live for the process.
_LEGACY = b"dltensor"
_VERSIONED = b"dltensor_versioned"

# -- exported tensors ------------------------------------------------------------------
_exports: dict[int, tuple[Any, Any, Any]] = {}
"""Address of a managed tensor -> (the structure, its shape array, the owner)."""


_pending_error = ctypes.PYFUNCTYPE(ctypes.c_void_p)(("PyErr_Occurred", _api))


def _clear_pending_error() -> None:
    """Clear an exception C code was raising when it dropped a capsule or tensor.

    Nothing else in a callback can run while one is set (see the module docstring).
    ctypes raises it here, as if ``PyErr_Occurred`` had failed, and it is dropped.
    """
    try:
        _pending_error()
    except BaseException:  # noqa: BLE001 - cannot be restored from a callback
        pass


def _release(address: int | None) -> None:
    """The DLPack ``deleter``: forget the structure and drop the owner reference.

    Runs on whatever thread the consumer releases the tensor from (ctypes takes the
    GIL). ``dict.pop`` is atomic, so a tensor is released at most once.
    """
    _clear_pending_error()
    _exports.pop(address or 0, None)


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_release)
_DELETER_ADDRESS = ctypes.cast(_DELETER, ctypes.c_void_p).value


def _destructor(name: bytes) -> Any:
    """The capsule destructor of the DLPack specification, for capsules named ``name``.

    A consumer renames the capsule when it takes the tensor over; only a capsule that
    still has its original name (never consumed) releases the tensor here.
    """

    def destroy(capsule: int | None) -> None:
        _clear_pending_error()
        if capsule and _raw_is_valid(capsule, name):
            _release(_raw_pointer(capsule, name))

    return ctypes.CFUNCTYPE(None, ctypes.c_void_p)(destroy)


_DESTRUCTORS = {False: _destructor(_LEGACY), True: _destructor(_VERSIONED)}


def _as_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"dlpack_export: {what} must be an int, got {type(value).__name__}"
        )
    return value


def _checked_arguments(
    data_ptr: Any,
    shape: Any,
    dtype_code: Any,
    dtype_bits: Any,
    device_id: Any,
    device_type: Any,
    versioned: Any,
) -> tuple[int, ...]:
    """Check the arguments of :func:`dlpack_export` (its ``Raises``); returns the
    extents of ``shape`` as a tuple."""
    data_ptr = _as_int(data_ptr, "data_ptr")
    dtype_code = _as_int(dtype_code, "dtype_code")
    dtype_bits = _as_int(dtype_bits, "dtype_bits")
    device_id = _as_int(device_id, "device_id")
    device_type = _as_int(device_type, "device_type")
    if not isinstance(versioned, bool):
        raise TypeError(
            f"dlpack_export: versioned must be a bool, got {type(versioned).__name__}"
        )
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise TypeError(
            f"dlpack_export: shape must be a sequence of ints, got {type(shape).__name__}"
        )
    extents = tuple(_as_int(extent, "every extent of shape") for extent in shape)
    if data_ptr < 0:
        raise ValueError(f"dlpack_export: data_ptr must not be negative, got {data_ptr}")
    if any(extent < 0 for extent in extents):
        raise ValueError(f"dlpack_export: negative extent in shape {extents}")
    if dtype_code not in _CODES:
        raise ValueError(
            f"dlpack_export: unknown DLPack type code {dtype_code}; use "
            "int 0, uint 1, float 2, bfloat 4, complex 5 or bool 6"
        )
    if dtype_bits <= 0 or dtype_bits % 8 or dtype_bits > 255:
        raise ValueError(
            f"dlpack_export: dtype_bits must be a positive multiple of 8 "
            f"(at most 248), got {dtype_bits}"
        )
    return extents


def dlpack_export(
    owner: Any,
    data_ptr: int,
    shape: Any,
    dtype_code: int,
    dtype_bits: int,
    device_id: int,
    *,
    device_type: int = CUDA,
    versioned: bool = False,
) -> Any:
    """Build a DLPack capsule for compact C-contiguous memory.

    Parameters
    ----------
    owner : object
        Kept alive (strong reference) until the consumer releases the tensor or, if
        the capsule is never consumed, until the capsule is collected.
    data_ptr : int
        Address of the first element.
    shape : sequence of int
        Copied into the capsule.
    dtype_code, dtype_bits : int
        DLPack type code (int 0, uint 1, float 2, bfloat 4, complex 5, bool 6) and
        bit width (a positive multiple of 8); one lane.
    device_id : int
        Device ordinal.
    device_type : int, optional
        DLPack device type (default 2, CUDA; 3 CUDA host, 13 CUDA managed, 1 CPU).
    versioned : bool, optional
        ``True``: a ``"dltensor_versioned"`` capsule (DLPack 1.0); ``False`` (the
        reference's form): ``"dltensor"``.

    Returns
    -------
    PyCapsule

    Raises
    ------
    TypeError
        An argument of the wrong type.
    ValueError
        An unknown type code, a bit width that is not a positive multiple of 8, a
        negative address or extent.

    Notes
    -----
    No strides (compact C order) and byte offset 0. The capsule borrows the memory:
    keeping it valid is ``owner``'s job. The consumer's deleter may run on any thread.
    """
    extents = _checked_arguments(
        data_ptr, shape, dtype_code, dtype_bits, device_id, device_type, versioned
    )
    return export_capsule(
        owner,
        data_ptr,
        extents,
        dtype_code,
        dtype_bits,
        device_type,
        device_id,
        bool(versioned),
    )


def export_capsule(
    owner: Any,
    data_ptr: int,
    shape: tuple[int, ...],
    code: int,
    bits: int,
    device_type: int,
    device_id: int,
    versioned: bool,
    readonly: bool = False,
    byte_offset: int = 0,
) -> Any:
    """:func:`dlpack_export` without the argument checks (see there); the tensor
    starts ``byte_offset`` bytes after ``data_ptr``."""
    ndim = len(shape)
    extents = (ctypes.c_int64 * max(ndim, 1))(*shape)
    managed: DLManagedTensor | DLManagedTensorVersioned
    if versioned:
        managed = DLManagedTensorVersioned()
        managed.version.major, managed.version.minor = _VERSION
        managed.flags = _READ_ONLY if readonly else 0
        name = _VERSIONED
    else:
        managed = DLManagedTensor()
        name = _LEGACY
    tensor = managed.dl_tensor
    tensor.data = data_ptr or None
    tensor.device.device_type = device_type
    tensor.device.device_id = device_id
    tensor.ndim = ndim
    tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes = code, bits, 1
    tensor.shape = ctypes.cast(extents, ctypes.POINTER(ctypes.c_int64))
    tensor.byte_offset = byte_offset
    address = ctypes.addressof(managed)
    managed.manager_ctx = address
    managed.deleter = _DELETER_ADDRESS
    _exports[address] = (managed, extents, owner)
    try:
        destructor = _DESTRUCTORS[versioned]
        return _capsule_new(address, name, ctypes.cast(destructor, ctypes.c_void_p))
    except BaseException:
        _release(address)
        raise


def dtype_code(dtype: np.dtype) -> tuple[int, int] | None:
    """The DLPack ``(code, bits)`` of a NumPy dtype, ``None`` when it has none."""
    code = _KIND_CODES.get(dtype.kind)
    if code is None or dtype.fields is not None or dtype.subdtype is not None:
        return None
    if not dtype.isnative:  # DLPack has no byte order: native only
        return None
    if dtype.kind == "f" and dtype.itemsize == 16 and np.finfo(dtype).nmant != 112:
        return None  # x87 extended precision is not IEEE binary128
    if (
        dtype.kind == "c"
        and dtype.itemsize == 32
        and np.finfo(dtype.type(0).real.dtype).nmant != 112
    ):
        return None
    return code, dtype.itemsize * 8


def numpy_dtype(code: int, bits: int, lanes: int) -> np.dtype:
    """The NumPy dtype of a DLPack data type.

    Raises
    ------
    TypeError
        The type has no NumPy equivalent (bfloat16, vector lanes, odd widths).
    """
    kind = _CODE_KINDS.get(code)
    if kind is None or lanes != 1 or bits % 8 or (kind == "b" and bits != 8):
        name = _CODES.get(code, f"code {code}")
        raise TypeError(
            f"the DLPack data type {name}{bits} (lanes {lanes}) has no "
            "NumPy equivalent; convert the tensor (e.g. to float32) first"
        )
    try:
        return np.dtype(f"{kind}{bits // 8}")
    except TypeError as exc:
        raise TypeError(
            f"the DLPack data type {_CODES[code]}{bits} has no NumPy equivalent"
        ) from exc


@dataclass
class DLPackTensor:
    """What a producer's capsule describes."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None
    """In elements, as DLPack gives them; ``None`` for compact C order."""
    dtype: np.dtype
    device: tuple[int, int]
    readonly: bool


def request_capsule(producer: Any, stream: int) -> Any:
    """Ask ``producer`` for a capsule whose data is ready for work on ``stream``.

    A versioned capsule is asked for first; producers that predate DLPack 1.0 (no
    ``max_version`` keyword) are asked again without it.
    """
    try:
        return producer.__dlpack__(stream=stream, max_version=_VERSION)
    except TypeError as exc:
        if "max_version" not in str(exc):
            raise
    return producer.__dlpack__(stream=stream)


def read_capsule(capsule: Any) -> DLPackTensor:
    """Describe the tensor behind a producer's (unconsumed) capsule.

    Raises
    ------
    TypeError
        Not a DLPack capsule, an already consumed one, or a dtype without a NumPy
        equivalent.
    ShapeError
        A versioned capsule of an unsupported major version.

    Notes
    -----
    The capsule is left unconsumed: keep it alive as long as the memory is used, and
    its producer's destructor releases the tensor when it is collected.
    """
    try:
        name = _capsule_name(capsule)
    except (ValueError, TypeError, ctypes.ArgumentError) as exc:
        raise TypeError(
            f"__dlpack__() returned {type(capsule).__name__}, not a DLPack capsule"
        ) from exc
    if name == _VERSIONED:
        versioned = DLManagedTensorVersioned.from_address(_capsule_pointer(capsule, name))
        if versioned.version.major != 1:
            raise ShapeError(
                f"the producer's DLPack version {versioned.version.major}."
                f"{versioned.version.minor} is not supported (stflow reads "
                "1.x)"
            )
        tensor = versioned.dl_tensor
        readonly = bool(versioned.flags & _READ_ONLY)
    elif name == _LEGACY:
        tensor = DLManagedTensor.from_address(_capsule_pointer(capsule, name)).dl_tensor
        readonly = False
    else:
        raise TypeError(
            f"expected a 'dltensor' or 'dltensor_versioned' capsule, got "
            f"{name!r} (a consumed capsule cannot be read again)"
        )
    ndim = int(tensor.ndim)
    shape = tuple(int(tensor.shape[i]) for i in range(ndim)) if ndim else ()
    strides = (
        tuple(int(tensor.strides[i]) for i in range(ndim))
        if ndim and tensor.strides
        else None
    )
    dtype = numpy_dtype(
        int(tensor.dtype.code), int(tensor.dtype.bits), int(tensor.dtype.lanes)
    )
    ptr = int(tensor.data or 0) + int(tensor.byte_offset)
    device = (int(tensor.device.device_type), int(tensor.device.device_id))
    return DLPackTensor(ptr, shape, strides, dtype, device, readonly)
