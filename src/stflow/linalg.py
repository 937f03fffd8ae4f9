"""Dense linear algebra for task bodies, the same call on both backends.

``gemm``, ``gemm_batched``, ``gemv``, ``syrk``, ``trsm``, ``trmm``, ``potrf``,
``trtri``, ``lauum`` and ``dot`` work in place on the arrays a body receives
(``t.run(fn)``: NumPy arrays on the emulated backend, CuPy arrays on CUDA), so one body
serves both::

    from stflow import linalg

    with ctx.task(a.read(), c.rw()) as t:
        t.run(lambda xp, a, c: linalg.syrk(a, c, alpha=-1.0, beta=1.0))

Why not CuPy's ``@`` or ``cupy.linalg``: CuPy refuses every cuBLAS and cuSOLVER call
while a stream is being captured into a CUDA graph (``NotImplementedError: calling
cuBLAS API during stream capture is currently unsupported``), so a body using them
fails in graph mode, in ``while_loop`` / ``repeat`` scopes and in ``task_graph``.
cuBLAS and cuSOLVER themselves can be captured: on CUDA arrays this module calls them
through nvmath-python's low-level bindings (``pip install 'stflow[linalg]'``; the CUDA
extras include it), on CuPy's current stream, which ``t.run`` sets to the task's
stream, with handles and workspaces of their own per stream (``stflow._linalg_cuda``
says how, and how row-major calls become the libraries' column-major ones). Nothing is
read back to the host: ``dot`` writes its result to device memory, and ``potrf`` and
``trtri`` report failures in ``info``. NumPy arrays need neither nvmath-python nor a
GPU.

Arrays are row-major (C order, unit stride along rows; a row pitch larger than the row
is fine, so tiles cut from a bigger matrix work) of float32 or float64, all of one
dtype. On CUDA any object with ``__cuda_array_interface__`` works (CuPy, PyTorch,
Numba, task views); the stream is ``stream=`` if given (a handle, an object with
``ptr`` or ``__cuda_stream__``), else CuPy's current stream.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from . import _linalg_cuda as _cuda

__all__ = [
    "dot",
    "gemm",
    "gemm_batched",
    "gemv",
    "lauum",
    "potrf",
    "syrk",
    "trmm",
    "trsm",
    "trtri",
]


# -- operands ---------------------------------------------------------------------
# A device operand is read from CuPy's own attributes when it is a CuPy array (faster
# than building its __cuda_array_interface__ dictionary), else from that interface.

_F64 = np.dtype(np.float64)
_F32 = np.dtype(np.float32)
_CUPY_TYPES: set[type] = set()
"""CuPy's array type, once an operand of that type was seen (CuPy is never imported
here)."""
_TYPESTRS: dict[str, np.dtype] = {}


def _read(array: Any) -> tuple[int, tuple[int, ...], Any, np.dtype]:
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


def _matrix(array: Any, name: str) -> tuple[int, int, int, int, np.dtype]:
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
        ptr, shape, strides, dtype = _read(array)
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


def _vector(array: Any, name: str) -> tuple[int, int, int, np.dtype]:
    """(pointer, length, element increment, dtype) of a 1-D device array."""
    ptr, shape, strides, dtype = _read(array)
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


def _batch(
    array: Any, name: str, count: int
) -> tuple[tuple[int, int, int], int, int, np.dtype]:
    """((pointer, row pitch, batch stride in elements), rows, cols, dtype) of a
    batch operand: 3-D with ``count`` matrices, or 2-D (one matrix, stride 0)."""
    ptr, shape, strides, dtype = _read(array)
    if len(shape) == 2:
        _, rows, cols, ld, _ = _matrix(array, name)
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


def _is64(*dtypes: np.dtype) -> bool:
    """Whether the operands are float64 (else float32); ``TypeError`` unless they
    share one of the two."""
    first = dtypes[0]
    for other in dtypes:
        if other is not first:
            break
    else:
        if first is _F64:
            return True
        if first is _F32:
            return False
    return _dtype_of(*dtypes) == _F64


def _dtype_of(*operands: Any) -> np.dtype:
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


def _shape(array: Any, name: str, ndim: int | None) -> tuple[int, ...]:
    """``array``'s shape (NumPy or CUDA Array Interface), of ``ndim`` dimensions."""
    shape = getattr(array, "shape", None)
    if shape is None:
        shape = array.__cuda_array_interface__["shape"]
    shape = tuple(int(n) for n in shape)
    if ndim is not None and len(shape) != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {shape}")
    return shape


def _flag(call: str, name: str, value: Any) -> bool:
    """``value`` as a bool, or ``TypeError`` unless it is one (NumPy's too): a string
    such as ``"U"`` or ``"T"`` would otherwise count as ``True``."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{call}: {name} must be True or False, got {value!r}")
    return bool(value)


def _stream_handle(stream: Any) -> int | None:
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


def _info_pointer(call: str, info: Any) -> int | None:
    """The address of ``info`` (a one-element int32 device array), ``None`` for
    none, or ``ValueError``."""
    if info is None:
        return None
    ptr, shape, _, dtype = _read(info)
    if tuple(shape) != (1,) or dtype != np.int32:
        raise ValueError(f"{call}: info must be a one-element int32 array")
    return ptr


def _host_info(call: str, info: Any) -> None:
    """``ValueError`` unless a host ``info`` is a one-element int32 array."""
    if info is not None and (
        _shape(info, "info", 1) != (1,) or np.dtype(info.dtype) != np.int32
    ):
        raise ValueError(f"{call}: info must be a one-element int32 array")


def _device(*arrays: Any) -> bool:
    """Whether the operands are CUDA arrays (at once for CuPy arrays), else NumPy
    ones; ``TypeError`` if mixed."""
    kind = type(arrays[0])
    if kind in _CUPY_TYPES:
        for other in arrays:
            if type(other) is not kind:
                return _on_device(*arrays)
        return True
    return _on_device(*arrays)


# -- products ---------------------------------------------------------------------


def gemm(
    a: Any,
    b: Any,
    c: Any,
    *,
    alpha: float = 1.0,
    beta: float = 0.0,
    trans_a: bool = False,
    trans_b: bool = False,
    stream: Any = None,
) -> None:
    """``c ← alpha · op(a) @ op(b) + beta · c``, ``op`` transposing when asked.

    Shapes: ``op(a)`` is m × k, ``op(b)`` k × n, ``c`` m × n.
    """
    if trans_a.__class__ is not bool or trans_b.__class__ is not bool:
        trans_a = _flag("gemm", "trans_a", trans_a)
        trans_b = _flag("gemm", "trans_b", trans_b)
    if not _device(a, b, c):
        _host_gemm(a, b, c, alpha, beta, trans_a, trans_b)
        return
    pa, rows_a, cols_a, lda, da = _matrix(a, "a")
    pb, rows_b, cols_b, ldb, db = _matrix(b, "b")
    pc, m_c, n_c, ldc, dc = _matrix(c, "c")
    m, k = (cols_a, rows_a) if trans_a else (rows_a, cols_a)
    kb, n = (cols_b, rows_b) if trans_b else (rows_b, cols_b)
    if k != kb or m_c != m or n_c != n:
        raise ValueError(
            f"gemm: op(a) {m}x{k} @ op(b) {kb}x{n} does not fit c {(m_c, n_c)}"
        )
    if da is db and da is dc and (da is _F64 or da is _F32):
        is64 = da is _F64
    else:
        is64 = _is64(da, db, dc)
    if m == 0 or n == 0:
        return
    if stream is not None and stream.__class__ is not int:
        stream = _stream_handle(stream)
    _cuda.gemm(
        stream, is64, trans_a, trans_b, m, n, k, alpha, pa, lda, pb, ldb, beta, pc, ldc
    )


def _host_gemm(
    a: Any, b: Any, c: Any, alpha: float, beta: float, trans_a: bool, trans_b: bool
) -> None:
    m, k = _shape(a, "a", 2)[::-1] if trans_a else _shape(a, "a", 2)
    kb, n = _shape(b, "b", 2)[::-1] if trans_b else _shape(b, "b", 2)
    if k != kb or _shape(c, "c", 2) != (m, n):
        raise ValueError(
            f"gemm: op(a) {m}x{k} @ op(b) {kb}x{n} does not fit c {_shape(c, 'c', 2)}"
        )
    _dtype_of(a, b, c)
    product = (a.T if trans_a else a) @ (b.T if trans_b else b)
    c[...] = alpha * product + (beta * c if beta else 0.0)


def gemm_batched(
    a: Any,
    b: Any,
    c: Any,
    *,
    alpha: float = 1.0,
    beta: float = 0.0,
    trans_a: bool = False,
    trans_b: bool = False,
    stream: Any = None,
) -> None:
    """``c[i] ← alpha · op(a[i]) @ op(b[i]) + beta · c[i]`` for every matrix ``i`` of
    a batch, in one library call (cuBLAS's strided batched GEMM): many small products
    at the cost of one call.

    ``c`` is 3-D (``count × m × n``); ``a`` and ``b`` are 3-D with the same count, or
    2-D for one matrix used in every product. The matrices of a batch may lie any
    distance apart (a 3-D array, or a 3-D view of a bigger one, with unit stride along
    rows); those of ``c`` must not overlap.
    """
    trans_a = _flag("gemm_batched", "trans_a", trans_a)
    trans_b = _flag("gemm_batched", "trans_b", trans_b)
    on_device = _device(a, b, c)
    count, m, n = _shape(c, "c", 3)
    if not on_device:
        _host_gemm_batched(a, b, c, alpha, beta, trans_a, trans_b, count, m, n)
        return
    A, rows_a, cols_a, da = _batch(a, "a", count)
    B, rows_b, cols_b, db = _batch(b, "b", count)
    C, _, _, dc = _batch(c, "c", count)
    if trans_a:
        rows_a, cols_a = cols_a, rows_a
    if trans_b:
        rows_b, cols_b = cols_b, rows_b
    if rows_a != m or cols_b != n or cols_a != rows_b:
        raise ValueError(
            f"gemm_batched: op(a) {rows_a}x{cols_a} @ op(b) "
            f"{rows_b}x{cols_b} does not fit c's matrices {m}x{n}"
        )
    is64 = _is64(da, db, dc)
    if C[2] == 0 and count > 1 and m * n > 0:
        raise ValueError(
            "gemm_batched: the matrices of c must not overlap, got a batch stride of 0"
        )
    if count == 0 or m == 0 or n == 0:
        return
    _cuda.gemm_batched(
        _stream_handle(stream),
        is64,
        trans_a,
        trans_b,
        m,
        n,
        cols_a,
        alpha,
        A,
        B,
        beta,
        C,
        count,
    )


def _host_gemm_batched(
    a: Any,
    b: Any,
    c: Any,
    alpha: float,
    beta: float,
    trans_a: bool,
    trans_b: bool,
    count: int,
    m: int,
    n: int,
) -> None:
    a_shape, b_shape = _batch_shape(a, "a", count), _batch_shape(b, "b", count)
    rows_a, cols_a = a_shape[-2:][::-1] if trans_a else a_shape[-2:]
    rows_b, cols_b = b_shape[-2:][::-1] if trans_b else b_shape[-2:]
    if rows_a != m or cols_b != n or cols_a != rows_b:
        raise ValueError(
            f"gemm_batched: op(a) {rows_a}x{cols_a} @ op(b) "
            f"{rows_b}x{cols_b} does not fit c's matrices {m}x{n}"
        )
    _dtype_of(a, b, c)
    op_a = np.swapaxes(a, -1, -2) if trans_a else a
    op_b = np.swapaxes(b, -1, -2) if trans_b else b
    c[...] = alpha * np.matmul(op_a, op_b) + (beta * c if beta else 0.0)


def _batch_shape(array: Any, name: str, count: int) -> tuple[int, ...]:
    """The shape of a batched operand: 3-D with ``count`` matrices, or 2-D."""
    shape = _shape(array, name, None)
    if len(shape) == 2 or (len(shape) == 3 and shape[0] == count):
        return shape
    raise ValueError(
        f"gemm_batched: {name} must be 2-D or 3-D with {count} matrices "
        f"(as c), got shape {shape}"
    )


def gemv(
    a: Any,
    x: Any,
    y: Any,
    *,
    alpha: float = 1.0,
    beta: float = 0.0,
    trans: bool = False,
    stream: Any = None,
) -> None:
    """``y ← alpha · op(a) @ x + beta · y`` (``trans``: ``aᵀ @ x``, which is
    ``x @ a``)."""
    trans = _flag("gemv", "trans", trans)
    if not _device(a, x, y):
        rows, cols = _shape(a, "a", 2)
        m, n = (cols, rows) if trans else (rows, cols)
        if _shape(x, "x", 1) != (n,) or _shape(y, "y", 1) != (m,):
            raise ValueError(
                f"gemv: op(a) {m}x{n} @ x {_shape(x, 'x', 1)} does not "
                f"fit y {_shape(y, 'y', 1)}"
            )
        _dtype_of(a, x, y)
        y[...] = alpha * ((a.T if trans else a) @ x) + (beta * y if beta else 0.0)
        return
    pa, rows, cols, lda, da = _matrix(a, "a")
    px, nx, incx, dx = _vector(x, "x")
    py, ny, incy, dy = _vector(y, "y")
    m, n = (cols, rows) if trans else (rows, cols)
    if nx != n or ny != m:
        raise ValueError(f"gemv: op(a) {m}x{n} @ x {(nx,)} does not fit y {(ny,)}")
    is64 = _is64(da, dx, dy)
    if m == 0:
        return
    _cuda.gemv(
        _stream_handle(stream),
        is64,
        trans,
        rows,
        cols,
        alpha,
        pa,
        lda,
        px,
        incx,
        beta,
        py,
        incy,
    )


def syrk(
    a: Any,
    c: Any,
    *,
    alpha: float = 1.0,
    beta: float = 0.0,
    trans: bool = False,
    stream: Any = None,
) -> None:
    """The lower triangle of ``c`` ← ``alpha · a @ aᵀ + beta · c`` (``trans``:
    ``aᵀ @ a``); its strictly upper triangle is left as it was."""
    if trans.__class__ is not bool:
        trans = _flag("syrk", "trans", trans)
    if not _device(a, c):
        n, k = _shape(a, "a", 2)[::-1] if trans else _shape(a, "a", 2)
        if _shape(c, "c", 2) != (n, n):
            raise ValueError(f"syrk: c must be {n}x{n}, got {_shape(c, 'c', 2)}")
        _dtype_of(a, c)
        product = a.T @ a if trans else a @ a.T
        lower = np.tril_indices(n)
        c[lower] = (alpha * product + (beta * c if beta else 0.0))[lower]
        return
    pa, rows, cols, lda, da = _matrix(a, "a")
    pc, rows_c, cols_c, ldc, dc = _matrix(c, "c")
    n, k = (cols, rows) if trans else (rows, cols)
    if rows_c != n or cols_c != n:
        raise ValueError(f"syrk: c must be {n}x{n}, got {(rows_c, cols_c)}")
    is64 = _is64(da, dc)
    if n == 0:
        return
    if stream is not None and stream.__class__ is not int:
        stream = _stream_handle(stream)
    _cuda.syrk(stream, is64, trans, n, k, alpha, pa, lda, beta, pc, ldc)


def dot(x: Any, y: Any, out: Any, *, stream: Any = None) -> None:
    """``out`` (one element) ← ``x · y``, written on the device on CUDA (no host
    read, so it works in graph mode)."""
    if not _device(x, y, out):
        if _shape(x, "x", 1) != _shape(y, "y", 1):
            raise ValueError(
                f"dot: x {_shape(x, 'x', 1)} and y {_shape(y, 'y', 1)} differ"
            )
        out_shape = _shape(out, "out", None)
        if math.prod(out_shape) != 1:
            raise ValueError(f"dot: out must have one element, got shape {out_shape}")
        _dtype_of(x, y, out)
        out[...] = np.dot(x, y)
        return
    px, nx, incx, dx = _vector(x, "x")
    py, ny, incy, dy = _vector(y, "y")
    if nx != ny:
        raise ValueError(f"dot: x {(nx,)} and y {(ny,)} differ")
    pout, out_shape, _, dout = _read(out)
    if math.prod(out_shape) != 1:
        raise ValueError(f"dot: out must have one element, got shape {tuple(out_shape)}")
    is64 = _is64(dx, dy, dout)
    _cuda.dot(_stream_handle(stream), is64, nx, px, incx, py, incy, pout)


# -- triangles --------------------------------------------------------------------


def trsm(
    a: Any,
    b: Any,
    *,
    side: str = "left",
    lower: bool = True,
    trans: bool = False,
    unit_diagonal: bool = False,
    alpha: float = 1.0,
    stream: Any = None,
) -> None:
    """Solve with the triangle of ``a``, in place: ``b ← alpha · op(a)⁻¹ @ b``
    (``side="left"``) or ``b ← alpha · b @ op(a)⁻¹`` (``side="right"``). Only the
    ``lower`` (or upper) triangle of ``a`` is read."""
    if _triangular_operands("trsm", a, b, side, lower, trans, unit_diagonal):
        _triangular_call(
            _cuda.trsm, "trsm", a, b, side, lower, trans, unit_diagonal, alpha, stream
        )
        return
    op = _triangle(a, lower, trans, unit_diagonal)
    if side == "left":
        b[...] = alpha * np.linalg.solve(op, b)
    else:
        b[...] = alpha * np.linalg.solve(op.T, b.T).T


def trmm(
    a: Any,
    b: Any,
    *,
    side: str = "left",
    lower: bool = True,
    trans: bool = False,
    unit_diagonal: bool = False,
    alpha: float = 1.0,
    stream: Any = None,
) -> None:
    """Multiply by the triangle of ``a``, in place: ``b ← alpha · op(a) @ b``
    (``side="left"``) or ``b ← alpha · b @ op(a)`` (``side="right"``). Only the
    ``lower`` (or upper) triangle of ``a`` is read; ``a`` and ``b`` must not overlap."""
    if _triangular_operands("trmm", a, b, side, lower, trans, unit_diagonal):
        _triangular_call(
            _cuda.trmm, "trmm", a, b, side, lower, trans, unit_diagonal, alpha, stream
        )
        return
    op = _triangle(a, lower, trans, unit_diagonal)
    b[...] = alpha * (op @ b if side == "left" else b @ op)


def _triangular_operands(
    call: str, a: Any, b: Any, side: str, lower: bool, trans: bool, unit: bool
) -> bool:
    """Whether the operands are on the device, after the checks of trsm and trmm
    (those of the shapes of device operands follow in :func:`_triangular_call`)."""
    if side != "left" and side != "right":
        raise ValueError(f"{call}: side must be 'left' or 'right', got {side!r}")
    if (
        lower.__class__ is not bool
        or trans.__class__ is not bool
        or unit.__class__ is not bool
    ):
        _flag(call, "lower", lower)
        _flag(call, "trans", trans)
        _flag(call, "unit_diagonal", unit)
    if _device(a, b):
        return True
    m, n = _shape(b, "b", 2)
    order = m if side == "left" else n
    if _shape(a, "a", 2) != (order, order):
        raise ValueError(
            f"{call}: a must be {order}x{order} for b {(m, n)} ({side}), "
            f"got {_shape(a, 'a', 2)}"
        )
    _dtype_of(a, b)
    return False


def _triangular_call(
    function: Any,
    call: str,
    a: Any,
    b: Any,
    side: str,
    lower: bool,
    trans: bool,
    unit: bool,
    alpha: float,
    stream: Any,
) -> None:
    """``_linalg_cuda.trsm`` or ``trmm`` on device operands, in place on ``b``."""
    pb, m, n, ldb, db = _matrix(b, "b")
    left = side == "left"
    order = m if left else n
    pa, rows, cols, lda, da = _matrix(a, "a")
    if rows != order or cols != order:
        raise ValueError(
            f"{call}: a must be {order}x{order} for b {(m, n)} ({side}), "
            f"got {(rows, cols)}"
        )
    is64 = _is64(da, db)
    if m == 0 or n == 0:
        return
    if stream is not None and stream.__class__ is not int:
        stream = _stream_handle(stream)
    function(
        stream,
        is64,
        left,
        bool(lower),
        bool(trans),
        bool(unit),
        m,
        n,
        alpha,
        pa,
        lda,
        pb,
        ldb,
    )


def _triangle(a: np.ndarray, lower: bool, trans: bool, unit: bool) -> np.ndarray:
    """``op`` of the triangle of a NumPy ``a``."""
    triangle = np.tril(a) if lower else np.triu(a)
    if unit:
        np.fill_diagonal(triangle, 1.0)
    return triangle.T if trans else triangle


def _square(call: str, a: Any) -> int:
    shape = _shape(a, "a", 2)
    if shape[0] != shape[1]:
        raise ValueError(f"{call}: a must be square, got {shape}")
    return shape[0]


def _device_square(call: str, a: Any) -> tuple[int, int, int, bool]:
    """(pointer, order, row pitch, is float64) of a square device matrix."""
    pa, rows, cols, lda, dtype = _matrix(a, "a")
    if rows != cols:
        raise ValueError(f"{call}: a must be square, got {(rows, cols)}")
    return pa, rows, lda, _is64(dtype)


def _triangle_indices(n: int, lower: bool, diagonal: bool) -> tuple[np.ndarray, ...]:
    """The indices of the ``lower`` (or upper) triangle, with the diagonal or not."""
    if lower:
        return np.tril_indices(n, 0 if diagonal else -1)
    return np.triu_indices(n, 0 if diagonal else 1)


# -- factorisations ---------------------------------------------------------------


def potrf(a: Any, *, info: Any = None, stream: Any = None) -> None:
    """Cholesky factor in place: the lower triangle of ``a`` ← ``L`` with
    ``L @ Lᵀ = a`` (only the lower triangle of ``a`` is read; the strictly upper one
    is left as it was).

    A matrix that is not positive definite: with NumPy, ``numpy.linalg.LinAlgError``;
    on CUDA nothing is raised (the call is asynchronous): ``info``, a one-element
    int32 array, gets cuSOLVER's code (0, or the order of the failing minor).
    """
    if not (_device(a) if info is None else _device(a, info)):
        n = _square("potrf", a)
        _host_info("potrf", info)
        _dtype_of(a)
        rows, cols = np.tril_indices(n)
        factor = np.linalg.cholesky(np.tril(a) + np.tril(a, -1).T)
        a[rows, cols] = factor[rows, cols]
        if info is not None:
            info[...] = 0
        return
    pa, n, lda, is64 = _device_square("potrf", a)
    word = _info_pointer("potrf", info)
    if n == 0:
        return
    if stream is not None and stream.__class__ is not int:
        stream = _stream_handle(stream)
    _cuda.potrf(stream, is64, n, pa, lda, word)


def trtri(
    a: Any,
    *,
    lower: bool = True,
    unit_diagonal: bool = False,
    info: Any = None,
    stream: Any = None,
) -> None:
    """Invert a triangular matrix in place: the ``lower`` (or upper) triangle of ``a``
    ← that of its inverse; the other triangle is neither read nor written. With
    ``unit_diagonal`` the diagonal is taken as ones, neither read nor written (it
    keeps what it held, on both backends, as LAPACK's ``trtri`` does).

    A zero on the diagonal: with NumPy, ``numpy.linalg.LinAlgError``; on CUDA nothing
    is raised (the call is asynchronous): ``info``, a one-element int32 array, gets
    cuSOLVER's code (0, or ``i`` when ``a[i-1, i-1]`` is zero).
    """
    lower = _flag("trtri", "lower", lower)
    unit_diagonal = _flag("trtri", "unit_diagonal", unit_diagonal)
    if not (_device(a) if info is None else _device(a, info)):
        _host_trtri(a, lower, unit_diagonal, info)
        return
    pa, n, lda, is64 = _device_square("trtri", a)
    word = _info_pointer("trtri", info)
    if n == 0:
        return
    _cuda.trtri(_stream_handle(stream), is64, n, lower, unit_diagonal, pa, lda, word)


def _host_trtri(a: Any, lower: bool, unit_diagonal: bool, info: Any) -> None:
    n = _square("trtri", a)
    _host_info("trtri", info)
    dtype = _dtype_of(a)
    triangle = _triangle(a, lower, False, unit_diagonal)
    zeros = np.flatnonzero(np.diagonal(triangle) == 0)
    if zeros.size:
        i = int(zeros[0])
        raise np.linalg.LinAlgError(
            f"trtri: a[{i}, {i}] is zero: the triangular matrix is singular"
        )
    inverse = np.linalg.solve(triangle, np.eye(n, dtype=dtype))
    where = _triangle_indices(n, lower, not unit_diagonal)
    a[where] = inverse[where]
    if info is not None:
        info[...] = 0


def lauum(a: Any, *, lower: bool = True, stream: Any = None) -> None:
    """The product of a triangle with its transpose, in place: the lower triangle of
    ``a`` ← that of ``Lᵀ @ L``, ``L`` its lower triangle (``lower=False``: the upper
    triangle ← that of ``U @ Uᵀ``). The other triangle is neither read nor written.

    With :func:`trtri` it makes LAPACK's ``potri``: after ``potrf`` (``a = L Lᵀ``),
    ``trtri`` (``L⁻¹``) and ``lauum`` (``L⁻ᵀ L⁻¹``) leave ``a⁻¹`` in the lower triangle.
    """
    lower = _flag("lauum", "lower", lower)
    if not _device(a):
        n = _square("lauum", a)
        _dtype_of(a)
        triangle = np.tril(a) if lower else np.triu(a)
        product = triangle.T @ triangle if lower else triangle @ triangle.T
        where = _triangle_indices(n, lower, True)
        a[where] = product[where]
        return
    pa, n, lda, is64 = _device_square("lauum", a)
    if n == 0:
        return
    _cuda.lauum(_stream_handle(stream), is64, n, lower, pa, lda)
