"""The operands of ``stflow.linalg``: which kind, which dtype, what shape and layout.

A routine takes all NumPy arrays or all CUDA arrays (``__cuda_array_interface__``):
:func:`cuda_arrays` tells which, and refuses a mix. Of a device operand this module
reads what the library calls need (pointer, extents, row pitch or element increment,
dtype) and checks that it is row-major with contiguous rows (``linalg``'s docstring
says which arrays qualify); of a host operand, its shape. The operands of a call share
one dtype, float32 or float64; flags are bools; ``stream=`` becomes a raw handle. CuPy
is never imported here: its array type is remembered once an operand of that type was
seen, and then read from its own attributes.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = [
    "F32",
    "F64",
    "batch_shape",
    "check_flag",
    "check_host_info",
    "cuda_arrays",
    "device_array",
    "device_batch",
    "device_matrix",
    "device_square",
    "device_vector",
    "dtype_of",
    "info_pointer",
    "is_float64",
    "shape_of",
    "square_order",
    "stream_handle",
]

# A device operand is read from CuPy's own attributes when it is a CuPy array (faster
# than building its __cuda_array_interface__ dictionary), else from that interface.

F64 = np.dtype(np.float64)
F32 = np.dtype(np.float32)
_CUPY_TYPES: set[type] = set()
"""CuPy's array type, once an operand of that type was seen (CuPy is never imported
here)."""
_TYPESTRS: dict[str, np.dtype] = {}


def device_array(array: Any) -> tuple[int, tuple[int, ...], Any, np.dtype]:
    """(pointer, shape, strides or ``None``, dtype) of a device array."""
    if type(array) in _CUPY_TYPES:
        return array.data.ptr, array.shape, array.strides, array.dtype
    interface = array.__cuda_array_interface__
    typestr = interface["typestr"]
    dtype = _TYPESTRS.get(typestr)
    if dtype is None:
        dtype = _TYPESTRS[typestr] = np.dtype(typestr)
    shape = tuple(int(n) for n in interface["shape"])
    return int(interface["data"][0]), shape, interface.get("strides"), dtype


def device_matrix(array: Any, name: str) -> tuple[int, int, int, int, np.dtype]:
    """(pointer, rows, cols, row pitch in elements, dtype) of a 2-D device array,
    row-major with contiguous rows, or ``ValueError``."""
    if type(array) in _CUPY_TYPES:
        ptr, shape, strides, dtype = (
            array.data.ptr,
            array.shape,
            array.strides,
            array.dtype,
        )
    else:
        ptr, shape, strides, dtype = device_array(array)
    if len(shape) != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(shape)}")
    rows, cols = shape
    if strides is None:
        return ptr, rows, cols, cols or 1, dtype
    size = dtype.itemsize
    row, col = strides
    if (col != size and cols > 1) or row % size or (row < cols * size and rows > 1):
        raise ValueError(
            f"{name} must be row-major with contiguous rows (C order, "
            f"or a tile of a C-order matrix); got strides {tuple(strides)} "
            f"for shape {tuple(shape)}"
        )
    # Past the checks, a pitch of several rows is at least cols (0 only when cols is).
    return ptr, rows, cols, (row // size if rows > 1 else cols) or 1, dtype


def device_vector(array: Any, name: str) -> tuple[int, int, int, np.dtype]:
    """(pointer, length, element increment, dtype) of a 1-D device array."""
    ptr, shape, strides, dtype = device_array(array)
    if len(shape) != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(shape)}")
    size = dtype.itemsize
    step = size if strides is None else int(strides[0])
    if step <= 0 or step % size:
        raise ValueError(
            f"{name}: a vector with a positive element stride is "
            f"needed, got a stride of {step} bytes"
        )
    return ptr, shape[0], step // size, dtype


def device_batch(
    array: Any, name: str, count: int
) -> tuple[tuple[int, int, int], int, int, np.dtype]:
    """((pointer, row pitch, batch stride in elements), rows, cols, dtype) of a
    batch operand: 3-D with ``count`` matrices, or 2-D (one matrix, stride 0)."""
    ptr, shape, strides, dtype = device_array(array)
    if len(shape) == 2:
        _, rows, cols, ld, _ = device_matrix(array, name)
        return (ptr, ld, 0), rows, cols, dtype
    if len(shape) != 3 or shape[0] != count:
        raise ValueError(
            f"gemm_batched: {name} must be 2-D or 3-D with {count} "
            f"matrices (as c), got shape {tuple(shape)}"
        )
    _, rows, cols = shape
    ld = _pitch(name, (rows, cols), dtype, None if strides is None else strides[1:])
    if strides is None:
        return (ptr, ld, rows * cols), rows, cols, dtype
    step = int(strides[0])
    if step < 0 or step % dtype.itemsize:
        raise ValueError(
            f"{name}: the matrices of a batch must lie a non-negative "
            f"multiple of the element size apart, got a stride of {step} "
            f"bytes"
        )
    return (ptr, ld, step // dtype.itemsize), rows, cols, dtype


def _pitch(name: str, shape: tuple[int, int], dtype: np.dtype, strides: Any) -> int:
    """The row pitch (elements) of a row-major matrix of ``shape``, or
    ``ValueError``."""
    rows, cols = shape
    if strides is None:
        return max(1, cols)
    size = dtype.itemsize
    row, col = (int(s) for s in strides)
    if (col != size and cols > 1) or row % size or (row < cols * size and rows > 1):
        raise ValueError(
            f"{name} must be row-major with contiguous rows (C order, "
            f"or a tile of a C-order matrix); got strides {tuple(strides)} "
            f"for shape {shape}"
        )
    return max(1, cols, row // size if rows > 1 else cols)


def _on_device(*arrays: Any) -> bool:
    """True for CUDA arrays, False for NumPy arrays; ``TypeError`` if mixed. CuPy's
    array type is remembered, for the fast checks of the routines."""
    device = [hasattr(a, "__cuda_array_interface__") for a in arrays]
    if all(device):
        for a in arrays:
            if type(a) not in _CUPY_TYPES and _is_cupy_array(a):
                _CUPY_TYPES.add(type(a))
        return True
    if not any(device) and all(isinstance(a, np.ndarray) for a in arrays):
        return False
    kinds = ", ".join(sorted({type(a).__name__ for a in arrays}))
    raise TypeError(
        f"stflow.linalg takes all NumPy arrays or all CUDA arrays "
        f"(__cuda_array_interface__), got {kinds}"
    )


def _is_cupy_array(array: Any) -> bool:
    """Whether ``array`` is exactly a ``cupy.ndarray`` (CuPy already imported)."""
    cupy = sys.modules.get("cupy")
    return cupy is not None and type(array) is getattr(cupy, "ndarray", None)


def is_float64(*dtypes: np.dtype) -> bool:
    """Whether the operands are float64 (else float32); ``TypeError`` unless they
    share one of the two."""
    first = dtypes[0]
    for other in dtypes:
        if other is not first:
            break
    else:
        if first is F64:
            return True
        if first is F32:
            return False
    return dtype_of(*dtypes) == F64


def dtype_of(*operands: Any) -> np.dtype:
    """The one dtype of ``operands`` (arrays or dtypes), float32 or float64, or
    ``TypeError``."""
    dtypes = {o if isinstance(o, np.dtype) else np.dtype(o.dtype) for o in operands}
    if len(dtypes) != 1:
        raise TypeError(
            f"stflow.linalg operands must share a dtype, got "
            f"{', '.join(sorted(str(d) for d in dtypes))}"
        )
    dtype = dtypes.pop()
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"stflow.linalg supports float32 and float64, got {dtype}")
    return dtype


def shape_of(array: Any, name: str, ndim: int | None) -> tuple[int, ...]:
    """``array``'s shape (NumPy or CUDA Array Interface), of ``ndim`` dimensions."""
    shape = getattr(array, "shape", None)
    if shape is None:
        shape = array.__cuda_array_interface__["shape"]
    shape = tuple(int(n) for n in shape)
    if ndim is not None and len(shape) != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {shape}")
    return shape


def check_flag(call: str, name: str, value: Any) -> bool:
    """``value`` as a bool, or ``TypeError`` unless it is one (NumPy's too): a string
    such as ``"U"`` or ``"T"`` would otherwise count as ``True``."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{call}: {name} must be True or False, got {value!r}")
    return bool(value)


def stream_handle(stream: Any) -> int | None:
    """The raw handle of ``stream=`` (``None``: CuPy's current stream)."""
    if stream is None or isinstance(stream, int):
        return stream
    ptr = getattr(stream, "ptr", None)
    if ptr is None:
        protocol = getattr(stream, "__cuda_stream__", None)
        if protocol is None:
            raise TypeError(
                f"stream must be a handle (int), an object with .ptr or "
                f"__cuda_stream__, got {type(stream).__name__}"
            )
        ptr = protocol()[1]
    return int(ptr)


def info_pointer(call: str, info: Any) -> int | None:
    """The address of ``info`` (a one-element int32 device array), ``None`` for
    none, or ``ValueError``."""
    if info is None:
        return None
    ptr, shape, _, dtype = device_array(info)
    if tuple(shape) != (1,) or dtype != np.int32:
        raise ValueError(f"{call}: info must be a one-element int32 array")
    return ptr


def check_host_info(call: str, info: Any) -> None:
    """``ValueError`` unless a host ``info`` is a one-element int32 array."""
    if info is not None and (
        shape_of(info, "info", 1) != (1,) or np.dtype(info.dtype) != np.int32
    ):
        raise ValueError(f"{call}: info must be a one-element int32 array")


def cuda_arrays(*arrays: Any) -> bool:
    """Whether the operands are CUDA arrays (at once for CuPy arrays), else NumPy
    ones; ``TypeError`` if mixed."""
    kind = type(arrays[0])
    if kind in _CUPY_TYPES:
        for other in arrays:
            if type(other) is not kind:
                return _on_device(*arrays)
        return True
    return _on_device(*arrays)


def batch_shape(array: Any, name: str, count: int) -> tuple[int, ...]:
    """The shape of a batched operand: 3-D with ``count`` matrices, or 2-D."""
    shape = shape_of(array, name, None)
    if len(shape) == 2 or (len(shape) == 3 and shape[0] == count):
        return shape
    raise ValueError(
        f"gemm_batched: {name} must be 2-D or 3-D with {count} matrices "
        f"(as c), got shape {shape}"
    )


def square_order(call: str, a: Any) -> int:
    shape = shape_of(a, "a", 2)
    if shape[0] != shape[1]:
        raise ValueError(f"{call}: a must be square, got {shape}")
    return shape[0]


def device_square(call: str, a: Any) -> tuple[int, int, int, bool]:
    """(pointer, order, row pitch, is float64) of a square device matrix."""
    pa, rows, cols, lda, dtype = device_matrix(a, "a")
    if rows != cols:
        raise ValueError(f"{call}: a must be square, got {(rows, cols)}")
    return pa, rows, lda, is_float64(dtype)
