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
from typing import Any

import numpy as np

from . import _linalg_cuda as _cuda

__all__ = ["dot", "gemm", "gemm_batched", "gemv", "lauum", "potrf", "syrk", "trmm",
           "trsm", "trtri"]


# -- operands ---------------------------------------------------------------------

class _Operand:
    """A device array as cuBLAS sees it: pointer, shape, leading dimension, element
    increment (vectors), batch stride (3-D arrays) — :class:`_linalg_cuda.Operand`."""

    __slots__ = ("ptr", "shape", "ld", "inc", "stride", "dtype")

    def __init__(self, array: Any, name: str, ndim: int) -> None:
        interface = array.__cuda_array_interface__
        self.shape = tuple(int(n) for n in interface["shape"])
        self.dtype = np.dtype(interface["typestr"])
        self.ptr = int(interface["data"][0])
        strides = interface.get("strides")
        self.stride = 0
        if ndim == 3:
            self.ld, self.stride = _batch_layout(name, self.shape, self.dtype, strides)
            self.inc = 1
        else:
            self.ld, self.inc = _layout(name, self.shape, self.dtype, strides, ndim)


def _layout(name: str, shape: tuple[int, ...], dtype: np.dtype,
            strides: Any, ndim: int) -> tuple[int, int]:
    """(leading dimension, increment) of a row-major operand, or ``ValueError``."""
    if len(shape) != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {shape}")
    size = dtype.itemsize
    if ndim == 0:
        return 1, 1
    if ndim == 1:
        step = size if strides is None else int(strides[0])
        if step <= 0 or step % size:
            raise ValueError(f"{name}: a vector with a positive element stride is "
                             f"needed, got a stride of {step} bytes")
        return 1, step // size
    rows, cols = shape
    if strides is None:
        return max(1, cols), 1
    row, col = (int(s) for s in strides)
    if (col != size and cols > 1) or row % size or (row < cols * size and rows > 1):
        raise ValueError(f"{name} must be row-major with contiguous rows (C order, "
                         f"or a tile of a C-order matrix); got strides {tuple(strides)} "
                         f"for shape {shape}")
    return max(1, cols, row // size if rows > 1 else cols), 1


def _batch_layout(name: str, shape: tuple[int, ...], dtype: np.dtype,
                  strides: Any) -> tuple[int, int]:
    """(leading dimension, batch stride in elements) of a batch of row-major
    matrices (``batch × rows × cols``), or ``ValueError``."""
    if len(shape) != 3:
        raise ValueError(f"{name} must be 3-D, got shape {shape}")
    _, rows, cols = shape
    ld, _ = _layout(name, shape[1:], dtype, None if strides is None else strides[1:], 2)
    if strides is None:
        return ld, rows * cols
    step = int(strides[0])
    if step < 0 or step % dtype.itemsize:
        raise ValueError(f"{name}: the matrices of a batch must lie a non-negative "
                         f"multiple of the element size apart, got a stride of {step} "
                         f"bytes")
    return ld, step // dtype.itemsize


def _on_device(*arrays: Any) -> bool:
    """True for CUDA arrays, False for NumPy arrays; ``TypeError`` if mixed."""
    device = [hasattr(a, "__cuda_array_interface__") for a in arrays]
    if all(device):
        return True
    if not any(device) and all(isinstance(a, np.ndarray) for a in arrays):
        return False
    kinds = ", ".join(sorted({type(a).__name__ for a in arrays}))
    raise TypeError(f"stflow.linalg takes all NumPy arrays or all CUDA arrays "
                    f"(__cuda_array_interface__), got {kinds}")


def _dtype_of(*operands: Any) -> np.dtype:
    dtypes = {np.dtype(o.dtype) for o in operands}
    if len(dtypes) != 1:
        raise TypeError(f"stflow.linalg operands must share a dtype, got "
                        f"{', '.join(sorted(str(d) for d in dtypes))}")
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


def _dtype(array: Any) -> np.dtype:
    interface = getattr(array, "__cuda_array_interface__", None)
    return np.dtype(array.dtype if interface is None else interface["typestr"])


def _flags(call: str, **flags: Any) -> None:
    """``TypeError`` unless every flag (``lower``, ``trans``, ...) is a bool: a string
    such as ``"U"`` or ``"T"`` would otherwise count as ``True``."""
    for name, value in flags.items():
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{call}: {name} must be True or False, got {value!r}")


def _stream_handle(stream: Any) -> int | None:
    """The raw handle of ``stream=`` (``None``: CuPy's current stream)."""
    if stream is None or isinstance(stream, int):
        return stream
    ptr = getattr(stream, "ptr", None)
    if ptr is None:
        protocol = getattr(stream, "__cuda_stream__", None)
        if protocol is None:
            raise TypeError(f"stream must be a handle (int), an object with .ptr or "
                            f"__cuda_stream__, got {type(stream).__name__}")
        ptr = protocol()[1]
    return int(ptr)


def _info_operand(call: str, info: Any) -> None:
    """``ValueError`` unless ``info`` is ``None`` or a one-element int32 array."""
    if info is not None and (_shape(info, "info", 1) != (1,)
                             or _dtype(info) != np.int32):
        raise ValueError(f"{call}: info must be a one-element int32 array")


def _info_pointer(info: Any) -> int | None:
    return None if info is None else _Operand(info, "info", 1).ptr


# -- products ---------------------------------------------------------------------

def gemm(a: Any, b: Any, c: Any, *, alpha: float = 1.0, beta: float = 0.0,
         trans_a: bool = False, trans_b: bool = False, stream: Any = None) -> None:
    """``c ← alpha · op(a) @ op(b) + beta · c``, ``op`` transposing when asked.

    Shapes: ``op(a)`` is m × k, ``op(b)`` k × n, ``c`` m × n.
    """
    _flags("gemm", trans_a=trans_a, trans_b=trans_b)
    on_device = _on_device(a, b, c)
    m, k = _shape(a, "a", 2)[::-1] if trans_a else _shape(a, "a", 2)
    kb, n = _shape(b, "b", 2)[::-1] if trans_b else _shape(b, "b", 2)
    if k != kb or _shape(c, "c", 2) != (m, n):
        raise ValueError(f"gemm: op(a) {m}x{k} @ op(b) {kb}x{n} does not fit "
                         f"c {_shape(c, 'c', 2)}")
    if not on_device:
        _dtype_of(a, b, c)
        product = (a.T if trans_a else a) @ (b.T if trans_b else b)
        c[...] = alpha * product + (beta * c if beta else 0.0)
        return
    A, B, C = _Operand(a, "a", 2), _Operand(b, "b", 2), _Operand(c, "c", 2)
    dtype = _dtype_of(A, B, C)
    if m == 0 or n == 0:
        return
    _cuda.gemm(_stream_handle(stream), dtype, trans_a, trans_b, m, n, k, alpha, A, B,
               beta, C)


def gemm_batched(a: Any, b: Any, c: Any, *, alpha: float = 1.0, beta: float = 0.0,
                 trans_a: bool = False, trans_b: bool = False,
                 stream: Any = None) -> None:
    """``c[i] ← alpha · op(a[i]) @ op(b[i]) + beta · c[i]`` for every matrix ``i`` of
    a batch, in one library call (cuBLAS's strided batched GEMM): many small products
    at the cost of one call.

    ``c`` is 3-D (``count × m × n``); ``a`` and ``b`` are 3-D with the same count, or
    2-D for one matrix used in every product. The matrices of a batch may lie any
    distance apart (a 3-D array, or a 3-D view of a bigger one, with unit stride along
    rows); those of ``c`` must not overlap.
    """
    _flags("gemm_batched", trans_a=trans_a, trans_b=trans_b)
    on_device = _on_device(a, b, c)
    count, m, n = _shape(c, "c", 3)
    a_shape, b_shape = _batch_shape(a, "a", count), _batch_shape(b, "b", count)
    rows_a, cols_a = a_shape[-2:][::-1] if trans_a else a_shape[-2:]
    rows_b, cols_b = b_shape[-2:][::-1] if trans_b else b_shape[-2:]
    if rows_a != m or cols_b != n or cols_a != rows_b:
        raise ValueError(f"gemm_batched: op(a) {rows_a}x{cols_a} @ op(b) "
                         f"{rows_b}x{cols_b} does not fit c's matrices {m}x{n}")
    if not on_device:
        _dtype_of(a, b, c)
        op_a = np.swapaxes(a, -1, -2) if trans_a else a
        op_b = np.swapaxes(b, -1, -2) if trans_b else b
        c[...] = alpha * np.matmul(op_a, op_b) + (beta * c if beta else 0.0)
        return
    A, B = _Operand(a, "a", len(a_shape)), _Operand(b, "b", len(b_shape))
    C = _Operand(c, "c", 3)
    dtype = _dtype_of(A, B, C)
    if C.stride == 0 and count > 1 and m * n > 0:
        raise ValueError("gemm_batched: the matrices of c must not overlap, got a "
                         "batch stride of 0")
    if count == 0 or m == 0 or n == 0:
        return
    _cuda.gemm_batched(_stream_handle(stream), dtype, trans_a, trans_b, m, n, cols_a,
                       alpha, A, B, beta, C, count)


def _batch_shape(array: Any, name: str, count: int) -> tuple[int, ...]:
    """The shape of a batched operand: 3-D with ``count`` matrices, or 2-D."""
    shape = _shape(array, name, None)
    if len(shape) == 2 or (len(shape) == 3 and shape[0] == count):
        return shape
    raise ValueError(f"gemm_batched: {name} must be 2-D or 3-D with {count} matrices "
                     f"(as c), got shape {shape}")


def gemv(a: Any, x: Any, y: Any, *, alpha: float = 1.0, beta: float = 0.0,
         trans: bool = False, stream: Any = None) -> None:
    """``y ← alpha · op(a) @ x + beta · y`` (``trans``: ``aᵀ @ x``, which is
    ``x @ a``)."""
    _flags("gemv", trans=trans)
    on_device = _on_device(a, x, y)
    rows, cols = _shape(a, "a", 2)
    m, n = (cols, rows) if trans else (rows, cols)
    if _shape(x, "x", 1) != (n,) or _shape(y, "y", 1) != (m,):
        raise ValueError(f"gemv: op(a) {m}x{n} @ x {_shape(x, 'x', 1)} does not fit "
                         f"y {_shape(y, 'y', 1)}")
    if not on_device:
        _dtype_of(a, x, y)
        y[...] = alpha * ((a.T if trans else a) @ x) + (beta * y if beta else 0.0)
        return
    A, X, Y = _Operand(a, "a", 2), _Operand(x, "x", 1), _Operand(y, "y", 1)
    dtype = _dtype_of(A, X, Y)
    if m == 0:
        return
    _cuda.gemv(_stream_handle(stream), dtype, trans, rows, cols, alpha, A, X, beta, Y)


def syrk(a: Any, c: Any, *, alpha: float = 1.0, beta: float = 0.0,
         trans: bool = False, stream: Any = None) -> None:
    """The lower triangle of ``c`` ← ``alpha · a @ aᵀ + beta · c`` (``trans``:
    ``aᵀ @ a``); its strictly upper triangle is left as it was."""
    _flags("syrk", trans=trans)
    on_device = _on_device(a, c)
    n, k = _shape(a, "a", 2)[::-1] if trans else _shape(a, "a", 2)
    if _shape(c, "c", 2) != (n, n):
        raise ValueError(f"syrk: c must be {n}x{n}, got {_shape(c, 'c', 2)}")
    if not on_device:
        _dtype_of(a, c)
        product = a.T @ a if trans else a @ a.T
        lower = np.tril_indices(n)
        c[lower] = (alpha * product + (beta * c if beta else 0.0))[lower]
        return
    A, C = _Operand(a, "a", 2), _Operand(c, "c", 2)
    dtype = _dtype_of(A, C)
    if n == 0:
        return
    _cuda.syrk(_stream_handle(stream), dtype, trans, n, k, alpha, A, beta, C)


def dot(x: Any, y: Any, out: Any, *, stream: Any = None) -> None:
    """``out`` (one element) ← ``x · y``, written on the device on CUDA (no host
    read, so it works in graph mode)."""
    on_device = _on_device(x, y, out)
    if _shape(x, "x", 1) != _shape(y, "y", 1):
        raise ValueError(f"dot: x {_shape(x, 'x', 1)} and y {_shape(y, 'y', 1)} differ")
    out_shape = _shape(out, "out", None)
    if math.prod(out_shape) != 1:
        raise ValueError(f"dot: out must have one element, got shape {out_shape}")
    if not on_device:
        _dtype_of(x, y, out)
        out[...] = np.dot(x, y)
        return
    X, Y = _Operand(x, "x", 1), _Operand(y, "y", 1)
    OUT = _Operand(out, "out", len(out_shape))
    dtype = _dtype_of(X, Y, OUT)
    _cuda.dot(_stream_handle(stream), dtype, X.shape[0], X, Y, OUT)


# -- triangles --------------------------------------------------------------------

def trsm(a: Any, b: Any, *, side: str = "left", lower: bool = True,
         trans: bool = False, unit_diagonal: bool = False, alpha: float = 1.0,
         stream: Any = None) -> None:
    """Solve with the triangle of ``a``, in place: ``b ← alpha · op(a)⁻¹ @ b``
    (``side="left"``) or ``b ← alpha · b @ op(a)⁻¹`` (``side="right"``). Only the
    ``lower`` (or upper) triangle of ``a`` is read."""
    on_device = _triangular_operands("trsm", a, b, side, lower, trans, unit_diagonal)
    if not on_device:
        op = _triangle(a, lower, trans, unit_diagonal)
        if side == "left":
            b[...] = alpha * np.linalg.solve(op, b)
        else:
            b[...] = alpha * np.linalg.solve(op.T, b.T).T
        return
    _triangular_call(_cuda.trsm, a, b, side, lower, trans, unit_diagonal, alpha, stream)


def trmm(a: Any, b: Any, *, side: str = "left", lower: bool = True,
         trans: bool = False, unit_diagonal: bool = False, alpha: float = 1.0,
         stream: Any = None) -> None:
    """Multiply by the triangle of ``a``, in place: ``b ← alpha · op(a) @ b``
    (``side="left"``) or ``b ← alpha · b @ op(a)`` (``side="right"``). Only the
    ``lower`` (or upper) triangle of ``a`` is read; ``a`` and ``b`` must not overlap."""
    on_device = _triangular_operands("trmm", a, b, side, lower, trans, unit_diagonal)
    if not on_device:
        op = _triangle(a, lower, trans, unit_diagonal)
        b[...] = alpha * (op @ b if side == "left" else b @ op)
        return
    _triangular_call(_cuda.trmm, a, b, side, lower, trans, unit_diagonal, alpha, stream)


def _triangular_operands(call: str, a: Any, b: Any, side: str, lower: bool,
                         trans: bool, unit: bool) -> bool:
    """Whether the operands are on the device, after the checks of trsm and trmm."""
    if side not in ("left", "right"):
        raise ValueError(f"{call}: side must be 'left' or 'right', got {side!r}")
    _flags(call, lower=lower, trans=trans, unit_diagonal=unit)
    on_device = _on_device(a, b)
    m, n = _shape(b, "b", 2)
    order = m if side == "left" else n
    if _shape(a, "a", 2) != (order, order):
        raise ValueError(f"{call}: a must be {order}x{order} for b {(m, n)} ({side}), "
                         f"got {_shape(a, 'a', 2)}")
    if not on_device:
        _dtype_of(a, b)
    return on_device


def _triangular_call(function: Any, a: Any, b: Any, side: str, lower: bool,
                     trans: bool, unit: bool, alpha: float, stream: Any) -> None:
    """``_linalg_cuda.trsm`` or ``trmm`` on device operands, in place on ``b``."""
    A, B = _Operand(a, "a", 2), _Operand(b, "b", 2)
    dtype = _dtype_of(A, B)
    m, n = B.shape
    if m == 0 or n == 0:
        return
    function(_stream_handle(stream), dtype, side == "left", lower, trans, unit, m, n,
             alpha, A, B)


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
    on_device = _on_device(a) if info is None else _on_device(a, info)
    n = _square("potrf", a)
    _info_operand("potrf", info)
    if not on_device:
        _dtype_of(a)
        rows, cols = np.tril_indices(n)
        factor = np.linalg.cholesky(np.tril(a) + np.tril(a, -1).T)
        a[rows, cols] = factor[rows, cols]
        if info is not None:
            info[...] = 0
        return
    A = _Operand(a, "a", 2)
    dtype = _dtype_of(A)
    if n == 0:
        return
    _cuda.potrf(_stream_handle(stream), dtype, n, A, _info_pointer(info))


def trtri(a: Any, *, lower: bool = True, unit_diagonal: bool = False, info: Any = None,
          stream: Any = None) -> None:
    """Invert a triangular matrix in place: the ``lower`` (or upper) triangle of ``a``
    ← that of its inverse; the other triangle is neither read nor written. With
    ``unit_diagonal`` the diagonal is taken as ones and left as it was.

    A zero on the diagonal: with NumPy, ``numpy.linalg.LinAlgError``; on CUDA nothing
    is raised (the call is asynchronous): ``info``, a one-element int32 array, gets
    cuSOLVER's code (0, or ``i`` when ``a[i-1, i-1]`` is zero).
    """
    _flags("trtri", lower=lower, unit_diagonal=unit_diagonal)
    on_device = _on_device(a) if info is None else _on_device(a, info)
    n = _square("trtri", a)
    _info_operand("trtri", info)
    if not on_device:
        dtype = _dtype_of(a)
        triangle = _triangle(a, lower, False, unit_diagonal)
        zeros = np.flatnonzero(np.diagonal(triangle) == 0)
        if zeros.size:
            i = int(zeros[0])
            raise np.linalg.LinAlgError(f"trtri: a[{i}, {i}] is zero: the triangular "
                                        f"matrix is singular")
        inverse = np.linalg.solve(triangle, np.eye(n, dtype=dtype))
        where = _triangle_indices(n, lower, not unit_diagonal)
        a[where] = inverse[where]
        if info is not None:
            info[...] = 0
        return
    A = _Operand(a, "a", 2)
    dtype = _dtype_of(A)
    if n == 0:
        return
    _cuda.trtri(_stream_handle(stream), dtype, n, lower, unit_diagonal, A,
                _info_pointer(info))


def lauum(a: Any, *, lower: bool = True, stream: Any = None) -> None:
    """The product of a triangle with its transpose, in place: the lower triangle of
    ``a`` ← that of ``Lᵀ @ L``, ``L`` its lower triangle (``lower=False``: the upper
    triangle ← that of ``U @ Uᵀ``). The other triangle is neither read nor written.

    With :func:`trtri` it makes LAPACK's ``potri``: after ``potrf`` (``a = L Lᵀ``),
    ``trtri`` (``L⁻¹``) and ``lauum`` (``L⁻ᵀ L⁻¹``) leave ``a⁻¹`` in the lower triangle.
    """
    _flags("lauum", lower=lower)
    on_device = _on_device(a)
    n = _square("lauum", a)
    if not on_device:
        _dtype_of(a)
        triangle = np.tril(a) if lower else np.triu(a)
        product = triangle.T @ triangle if lower else triangle @ triangle.T
        where = _triangle_indices(n, lower, True)
        a[where] = product[where]
        return
    A = _Operand(a, "a", 2)
    dtype = _dtype_of(A)
    if n == 0:
        return
    _cuda.lauum(_stream_handle(stream), dtype, n, lower, A)
