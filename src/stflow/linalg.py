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
from ._linalg_operands import (
    F32,
    F64,
    batch_shape,
    check_flag,
    check_host_info,
    cuda_arrays,
    device_array,
    device_batch,
    device_matrix,
    device_square,
    device_vector,
    dtype_of,
    info_pointer,
    is_float64,
    shape_of,
    square_order,
    stream_handle,
)

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
        trans_a = check_flag("gemm", "trans_a", trans_a)
        trans_b = check_flag("gemm", "trans_b", trans_b)
    if not cuda_arrays(a, b, c):
        _host_gemm(a, b, c, alpha, beta, trans_a, trans_b)
        return
    pa, rows_a, cols_a, lda, da = device_matrix(a, "a")
    pb, rows_b, cols_b, ldb, db = device_matrix(b, "b")
    pc, m_c, n_c, ldc, dc = device_matrix(c, "c")
    m, k = (cols_a, rows_a) if trans_a else (rows_a, cols_a)
    kb, n = (cols_b, rows_b) if trans_b else (rows_b, cols_b)
    if k != kb or m_c != m or n_c != n:
        raise ValueError(
            f"gemm: op(a) {m}x{k} @ op(b) {kb}x{n} does not fit c {(m_c, n_c)}"
        )
    if da is db and da is dc and (da is F64 or da is F32):
        is64 = da is F64
    else:
        is64 = is_float64(da, db, dc)
    if m == 0 or n == 0:
        return
    if stream is not None and stream.__class__ is not int:
        stream = stream_handle(stream)
    _cuda.gemm(
        stream, is64, trans_a, trans_b, m, n, k, alpha, pa, lda, pb, ldb, beta, pc, ldc
    )


def _host_gemm(
    a: Any, b: Any, c: Any, alpha: float, beta: float, trans_a: bool, trans_b: bool
) -> None:
    m, k = shape_of(a, "a", 2)[::-1] if trans_a else shape_of(a, "a", 2)
    kb, n = shape_of(b, "b", 2)[::-1] if trans_b else shape_of(b, "b", 2)
    if k != kb or shape_of(c, "c", 2) != (m, n):
        raise ValueError(
            f"gemm: op(a) {m}x{k} @ op(b) {kb}x{n} does not fit c {shape_of(c, 'c', 2)}"
        )
    dtype_of(a, b, c)
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
    trans_a = check_flag("gemm_batched", "trans_a", trans_a)
    trans_b = check_flag("gemm_batched", "trans_b", trans_b)
    on_device = cuda_arrays(a, b, c)
    count, m, n = shape_of(c, "c", 3)
    if not on_device:
        _host_gemm_batched(a, b, c, alpha, beta, trans_a, trans_b, count, m, n)
        return
    A, rows_a, cols_a, da = device_batch(a, "a", count)
    B, rows_b, cols_b, db = device_batch(b, "b", count)
    C, _, _, dc = device_batch(c, "c", count)
    if trans_a:
        rows_a, cols_a = cols_a, rows_a
    if trans_b:
        rows_b, cols_b = cols_b, rows_b
    if rows_a != m or cols_b != n or cols_a != rows_b:
        raise ValueError(
            f"gemm_batched: op(a) {rows_a}x{cols_a} @ op(b) "
            f"{rows_b}x{cols_b} does not fit c's matrices {m}x{n}"
        )
    is64 = is_float64(da, db, dc)
    if C[2] == 0 and count > 1 and m * n > 0:
        raise ValueError(
            "gemm_batched: the matrices of c must not overlap, got a batch stride of 0"
        )
    if count == 0 or m == 0 or n == 0:
        return
    _cuda.gemm_batched(
        stream_handle(stream),
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
    a_shape, b_shape = batch_shape(a, "a", count), batch_shape(b, "b", count)
    rows_a, cols_a = a_shape[-2:][::-1] if trans_a else a_shape[-2:]
    rows_b, cols_b = b_shape[-2:][::-1] if trans_b else b_shape[-2:]
    if rows_a != m or cols_b != n or cols_a != rows_b:
        raise ValueError(
            f"gemm_batched: op(a) {rows_a}x{cols_a} @ op(b) "
            f"{rows_b}x{cols_b} does not fit c's matrices {m}x{n}"
        )
    dtype_of(a, b, c)
    op_a = np.swapaxes(a, -1, -2) if trans_a else a
    op_b = np.swapaxes(b, -1, -2) if trans_b else b
    c[...] = alpha * np.matmul(op_a, op_b) + (beta * c if beta else 0.0)


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
    trans = check_flag("gemv", "trans", trans)
    if not cuda_arrays(a, x, y):
        rows, cols = shape_of(a, "a", 2)
        m, n = (cols, rows) if trans else (rows, cols)
        if shape_of(x, "x", 1) != (n,) or shape_of(y, "y", 1) != (m,):
            raise ValueError(
                f"gemv: op(a) {m}x{n} @ x {shape_of(x, 'x', 1)} does not "
                f"fit y {shape_of(y, 'y', 1)}"
            )
        dtype_of(a, x, y)
        y[...] = alpha * ((a.T if trans else a) @ x) + (beta * y if beta else 0.0)
        return
    pa, rows, cols, lda, da = device_matrix(a, "a")
    px, nx, incx, dx = device_vector(x, "x")
    py, ny, incy, dy = device_vector(y, "y")
    m, n = (cols, rows) if trans else (rows, cols)
    if nx != n or ny != m:
        raise ValueError(f"gemv: op(a) {m}x{n} @ x {(nx,)} does not fit y {(ny,)}")
    is64 = is_float64(da, dx, dy)
    if m == 0:
        return
    _cuda.gemv(
        stream_handle(stream),
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
        trans = check_flag("syrk", "trans", trans)
    if not cuda_arrays(a, c):
        n, k = shape_of(a, "a", 2)[::-1] if trans else shape_of(a, "a", 2)
        if shape_of(c, "c", 2) != (n, n):
            raise ValueError(f"syrk: c must be {n}x{n}, got {shape_of(c, 'c', 2)}")
        dtype_of(a, c)
        product = a.T @ a if trans else a @ a.T
        lower = np.tril_indices(n)
        c[lower] = (alpha * product + (beta * c if beta else 0.0))[lower]
        return
    pa, rows, cols, lda, da = device_matrix(a, "a")
    pc, rows_c, cols_c, ldc, dc = device_matrix(c, "c")
    n, k = (cols, rows) if trans else (rows, cols)
    if rows_c != n or cols_c != n:
        raise ValueError(f"syrk: c must be {n}x{n}, got {(rows_c, cols_c)}")
    is64 = is_float64(da, dc)
    if n == 0:
        return
    if stream is not None and stream.__class__ is not int:
        stream = stream_handle(stream)
    _cuda.syrk(stream, is64, trans, n, k, alpha, pa, lda, beta, pc, ldc)


def dot(x: Any, y: Any, out: Any, *, stream: Any = None) -> None:
    """``out`` (one element) ← ``x · y``, written on the device on CUDA (no host
    read, so it works in graph mode)."""
    if not cuda_arrays(x, y, out):
        if shape_of(x, "x", 1) != shape_of(y, "y", 1):
            raise ValueError(
                f"dot: x {shape_of(x, 'x', 1)} and y {shape_of(y, 'y', 1)} differ"
            )
        out_shape = shape_of(out, "out", None)
        if math.prod(out_shape) != 1:
            raise ValueError(f"dot: out must have one element, got shape {out_shape}")
        dtype_of(x, y, out)
        out[...] = np.dot(x, y)
        return
    px, nx, incx, dx = device_vector(x, "x")
    py, ny, incy, dy = device_vector(y, "y")
    if nx != ny:
        raise ValueError(f"dot: x {(nx,)} and y {(ny,)} differ")
    pout, out_shape, _, dout = device_array(out)
    if math.prod(out_shape) != 1:
        raise ValueError(f"dot: out must have one element, got shape {tuple(out_shape)}")
    is64 = is_float64(dx, dy, dout)
    _cuda.dot(stream_handle(stream), is64, nx, px, incx, py, incy, pout)


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
        check_flag(call, "lower", lower)
        check_flag(call, "trans", trans)
        check_flag(call, "unit_diagonal", unit)
    if cuda_arrays(a, b):
        return True
    m, n = shape_of(b, "b", 2)
    order = m if side == "left" else n
    if shape_of(a, "a", 2) != (order, order):
        raise ValueError(
            f"{call}: a must be {order}x{order} for b {(m, n)} ({side}), "
            f"got {shape_of(a, 'a', 2)}"
        )
    dtype_of(a, b)
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
    pb, m, n, ldb, db = device_matrix(b, "b")
    left = side == "left"
    order = m if left else n
    pa, rows, cols, lda, da = device_matrix(a, "a")
    if rows != order or cols != order:
        raise ValueError(
            f"{call}: a must be {order}x{order} for b {(m, n)} ({side}), "
            f"got {(rows, cols)}"
        )
    is64 = is_float64(da, db)
    if m == 0 or n == 0:
        return
    if stream is not None and stream.__class__ is not int:
        stream = stream_handle(stream)
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
    if not (cuda_arrays(a) if info is None else cuda_arrays(a, info)):
        n = square_order("potrf", a)
        check_host_info("potrf", info)
        dtype_of(a)
        rows, cols = np.tril_indices(n)
        factor = np.linalg.cholesky(np.tril(a) + np.tril(a, -1).T)
        a[rows, cols] = factor[rows, cols]
        if info is not None:
            info[...] = 0
        return
    pa, n, lda, is64 = device_square("potrf", a)
    word = info_pointer("potrf", info)
    if n == 0:
        return
    if stream is not None and stream.__class__ is not int:
        stream = stream_handle(stream)
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
    lower = check_flag("trtri", "lower", lower)
    unit_diagonal = check_flag("trtri", "unit_diagonal", unit_diagonal)
    if not (cuda_arrays(a) if info is None else cuda_arrays(a, info)):
        _host_trtri(a, lower, unit_diagonal, info)
        return
    pa, n, lda, is64 = device_square("trtri", a)
    word = info_pointer("trtri", info)
    if n == 0:
        return
    _cuda.trtri(stream_handle(stream), is64, n, lower, unit_diagonal, pa, lda, word)


def _host_trtri(a: Any, lower: bool, unit_diagonal: bool, info: Any) -> None:
    n = square_order("trtri", a)
    check_host_info("trtri", info)
    dtype = dtype_of(a)
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
    lower = check_flag("lauum", "lower", lower)
    if not cuda_arrays(a):
        n = square_order("lauum", a)
        dtype_of(a)
        triangle = np.tril(a) if lower else np.triu(a)
        product = triangle.T @ triangle if lower else triangle @ triangle.T
        where = _triangle_indices(n, lower, True)
        a[where] = product[where]
        return
    pa, n, lda, is64 = device_square("lauum", a)
    if n == 0:
        return
    _cuda.lauum(stream_handle(stream), is64, n, lower, pa, lda)
