"""Dense linear algebra for task bodies, the same call on both backends.

``gemm``, ``gemv``, ``syrk``, ``trsm``, ``trmm``, ``potrf`` and ``dot`` work in place
on the arrays a body receives (``t.run(fn)``: NumPy arrays on the emulated backend,
CuPy arrays on CUDA), so one body serves both::

    from stflow import linalg

    with ctx.task(a.read(), c.rw()) as t:
        t.run(lambda xp, a, c: linalg.syrk(a, c, alpha=-1.0, beta=1.0))

Why not CuPy's ``@`` or ``cupy.linalg``: CuPy refuses every cuBLAS and cuSOLVER call
while a stream is being captured into a CUDA graph (``NotImplementedError: calling
cuBLAS API during stream capture is currently unsupported``), so a body using them
fails in graph mode, in ``while_loop`` / ``repeat`` scopes and in ``task_graph``.
cuBLAS and cuSOLVER themselves can be captured: here they are called directly (through
``ctypes``, on the libraries CuPy has loaded) on CuPy's current stream, which
``t.run`` sets to the task's stream. Nothing is read back to the host: ``dot``
writes its result to device memory and ``potrf`` reports failures in ``info``.

Arrays are row-major (C order, unit stride along rows; a row pitch larger than the row
is fine, so tiles cut from a bigger matrix work) of float32 or float64, all of one
dtype. On CUDA any object with ``__cuda_array_interface__`` works (CuPy, PyTorch,
Numba, task views); the stream is ``stream=`` if given (a handle or an object with
``ptr``), else CuPy's current stream.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import threading
from typing import Any

import numpy as np

__all__ = ["dot", "gemm", "gemv", "potrf", "syrk", "trmm", "trsm"]

# cuBLAS / cuSOLVER enumerations (cublas_api.h); the calls below are column-major.
_OP_N, _OP_T = 0, 1
_LOWER, _UPPER = 0, 1
_LEFT, _RIGHT = 0, 1
_NON_UNIT, _UNIT = 0, 1
_POINTER_HOST, _POINTER_DEVICE = 0, 1

_CUBLAS_WORKSPACE = 8 << 20
"""Bytes of cuBLAS workspace per stream (what large GEMM algorithms use on Hopper
fits; cuBLAS picks among the algorithms that fit)."""


# -- operands ---------------------------------------------------------------------

class _Operand:
    """A device array as cuBLAS sees it: pointer, shape, leading dimension."""

    __slots__ = ("ptr", "shape", "ld", "inc", "dtype")

    def __init__(self, array: Any, name: str, ndim: int) -> None:
        interface = array.__cuda_array_interface__
        self.shape = tuple(int(n) for n in interface["shape"])
        self.dtype = np.dtype(interface["typestr"])
        self.ptr = int(interface["data"][0])
        strides = interface.get("strides")
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


# -- the libraries ----------------------------------------------------------------

def _library(module: str, stem: str) -> ctypes.CDLL:
    """The shared library CuPy's ``module`` loaded (so both use one copy)."""
    import importlib
    importlib.import_module(module)
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                if f"/{stem}.so" in line:
                    return ctypes.CDLL(line.split()[-1])
    except OSError:
        pass
    found = ctypes.util.find_library(stem.removeprefix("lib"))
    if found is None:
        raise RuntimeError(f"stflow.linalg: {stem} not found (is CuPy installed with "
                           f"its CUDA libraries?)")
    return ctypes.CDLL(found)


class _ThreadHandles(threading.local):
    """Per thread: the handles of each (device, stream)."""

    def __init__(self) -> None:
        self.handles: dict[tuple[int, int], _Handles] = {}


class _Libraries:
    """cuBLAS and cuSOLVER, loaded once, with handles per (thread, device, stream)."""

    def __init__(self) -> None:
        self.cublas = _library("cupy_backends.cuda.libs.cublas", "libcublas")
        self.cusolver = _library("cupy_backends.cuda.libs.cusolver", "libcusolver")
        self.local = _ThreadHandles()
        self.functions: dict[tuple[str, str], Any] = {}
        import cupy
        self.cupy = cupy

    def handles(self, stream: Any) -> _Handles:
        cupy = self.cupy
        stream = (cupy.cuda.get_current_stream().ptr if stream is None
                  else _stream_handle(stream))
        key = (cupy.cuda.runtime.getDevice(), stream)
        known = self.local.handles
        handles = known.get(key)
        if handles is None:
            handles = known[key] = _Handles(self, stream)
        return handles


class _Handles:
    """A cuBLAS and a cuSOLVER handle of one device, thread and stream, and the
    buffers they use (grown, never freed while the handles live: a recorded graph
    keeps using the addresses it captured).

    One pair per stream, bound once: switching a handle's stream costs host time at
    every task (the pool hands out several streams in turn) and resets cuBLAS's
    workspace. Each has a workspace of its own, set explicitly: without one, cuBLAS
    allocates it in stream order while a graph is captured, which makes memory nodes,
    and a graph used as a child node or as a conditional node's body may not hold
    those."""

    def __init__(self, libs: _Libraries, stream: int) -> None:
        self.libs = libs
        self.stream = stream
        self.buffers: dict[str, tuple[Any, ...]] = {}
        self.blas = ctypes.c_void_p()
        self.solver = ctypes.c_void_p()
        cublas, cusolver = libs.cublas, libs.cusolver
        _blas_ok(cublas.cublasCreate_v2(ctypes.byref(self.blas)), "cublasCreate")
        _solver_ok(cusolver.cusolverDnCreate(ctypes.byref(self.solver)),
                   "cusolverDnCreate")
        _blas_ok(cublas.cublasSetStream_v2(self.blas, ctypes.c_void_p(stream)),
                 "cublasSetStream")
        workspace = self.buffer("cublas", _CUBLAS_WORKSPACE)
        _blas_ok(cublas.cublasSetWorkspace_v2(self.blas, ctypes.c_void_p(workspace),
                                              ctypes.c_size_t(_CUBLAS_WORKSPACE)),
                 "cublasSetWorkspace")
        _solver_ok(cusolver.cusolverDnSetStream(self.solver, ctypes.c_void_p(stream)),
                   "cusolverDnSetStream")

    def buffer(self, kind: str, nbytes: int) -> int:
        """A device buffer of at least ``nbytes`` for ``kind`` (grown as needed; a
        replaced one is kept for graphs that captured it)."""
        held = self.buffers.get(kind)
        if held is None or held[-1].mem.size < nbytes:
            memory = self.libs.cupy.cuda.alloc(max(nbytes, 256))
            held = self.buffers[kind] = (held or ()) + (memory,)
        return int(held[-1].ptr)


_LIBRARIES: _Libraries | None = None
_LOCK = threading.Lock()


def _handles(stream: Any) -> _Handles:
    """The handles of the current device and thread, bound to ``stream`` (CuPy's
    current stream when ``None``)."""
    global _LIBRARIES
    if _LIBRARIES is None:
        with _LOCK:
            if _LIBRARIES is None:
                _LIBRARIES = _Libraries()
    return _LIBRARIES.handles(stream)


def _stream_handle(stream: Any) -> int:
    if isinstance(stream, int):
        return stream
    ptr = getattr(stream, "ptr", None)
    if ptr is None:
        protocol = getattr(stream, "__cuda_stream__", None)
        if protocol is None:
            raise TypeError(f"stream must be a handle (int), an object with .ptr or "
                            f"__cuda_stream__, got {type(stream).__name__}")
        ptr = protocol()[1]
    return int(ptr)


def _blas_ok(status: int, call: str) -> None:
    if status != 0:
        raise RuntimeError(f"{call} failed: cuBLAS status {status}")


def _solver_ok(status: int, call: str) -> None:
    if status != 0:
        raise RuntimeError(f"{call} failed: cuSOLVER status {status}")


def _scalar(dtype: np.dtype, value: float) -> Any:
    kind = ctypes.c_double if dtype == np.float64 else ctypes.c_float
    return ctypes.byref(kind(value))


def _blas(handles: _Handles, dtype: np.dtype, name: str) -> Any:
    """``cublas{D,S}{name}_v2`` for ``dtype`` (looked up once)."""
    functions = handles.libs.functions
    key = (dtype.char, name)
    function = functions.get(key)
    if function is None:
        prefix = "D" if dtype == np.float64 else "S"
        function = functions[key] = getattr(handles.libs.cublas,
                                            f"cublas{prefix}{name}_v2")
    return function


def _ptr(value: int) -> ctypes.c_void_p:
    return ctypes.c_void_p(value)


# -- the operations ---------------------------------------------------------------

def gemm(a: Any, b: Any, c: Any, *, alpha: float = 1.0, beta: float = 0.0,
         trans_a: bool = False, trans_b: bool = False, stream: Any = None) -> None:
    """``c ← alpha · op(a) @ op(b) + beta · c``, ``op`` transposing when asked.

    Shapes: ``op(a)`` is m × k, ``op(b)`` k × n, ``c`` m × n.
    """
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
    h = _handles(stream)
    # Row-major C = op(A) op(B) is column-major Cᵀ = op(B)ᵀ op(A)ᵀ.
    _blas_ok(_blas(h, dtype, "gemm")(
        h.blas, _OP_T if trans_b else _OP_N, _OP_T if trans_a else _OP_N,
        n, m, k, _scalar(dtype, alpha), _ptr(B.ptr), B.ld, _ptr(A.ptr), A.ld,
        _scalar(dtype, beta), _ptr(C.ptr), C.ld), "gemm")


def gemv(a: Any, x: Any, y: Any, *, alpha: float = 1.0, beta: float = 0.0,
         trans: bool = False, stream: Any = None) -> None:
    """``y ← alpha · op(a) @ x + beta · y`` (``trans``: ``aᵀ @ x``, which is
    ``x @ a``)."""
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
    h = _handles(stream)
    # Row-major A is column-major Aᵀ (cols × rows, ld): op flips.
    _blas_ok(_blas(h, dtype, "gemv")(
        h.blas, _OP_N if trans else _OP_T, cols, rows, _scalar(dtype, alpha),
        _ptr(A.ptr), A.ld, _ptr(X.ptr), X.inc, _scalar(dtype, beta),
        _ptr(Y.ptr), Y.inc), "gemv")


def syrk(a: Any, c: Any, *, alpha: float = 1.0, beta: float = 0.0,
         trans: bool = False, stream: Any = None) -> None:
    """The lower triangle of ``c`` ← ``alpha · a @ aᵀ + beta · c`` (``trans``:
    ``aᵀ @ a``); its strictly upper triangle is left as it was."""
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
    h = _handles(stream)
    # Row-major lower = column-major upper; row-major A is column-major Aᵀ.
    _blas_ok(_blas(h, dtype, "syrk")(
        h.blas, _UPPER, _OP_N if trans else _OP_T, n, k, _scalar(dtype, alpha),
        _ptr(A.ptr), A.ld, _scalar(dtype, beta), _ptr(C.ptr), C.ld), "syrk")


def trsm(a: Any, b: Any, *, side: str = "left", lower: bool = True,
         trans: bool = False, unit_diagonal: bool = False, alpha: float = 1.0,
         stream: Any = None) -> None:
    """Solve with the triangle of ``a``, in place: ``b ← alpha · op(a)⁻¹ @ b``
    (``side="left"``) or ``b ← alpha · b @ op(a)⁻¹`` (``side="right"``). Only the
    ``lower`` (or upper) triangle of ``a`` is read."""
    _, _, on_device = _triangular_operands("trsm", a, b, side)
    if not on_device:
        op = _triangle(a, lower, trans, unit_diagonal)
        if side == "left":
            b[...] = alpha * np.linalg.solve(op, b)
        else:
            b[...] = alpha * np.linalg.solve(op.T, b.T).T
        return
    _triangular_call("trsm", a, b, side, lower, trans, unit_diagonal, alpha, stream)


def trmm(a: Any, b: Any, *, side: str = "left", lower: bool = True,
         trans: bool = False, unit_diagonal: bool = False, alpha: float = 1.0,
         stream: Any = None) -> None:
    """Multiply by the triangle of ``a``, in place: ``b ← alpha · op(a) @ b``
    (``side="left"``) or ``b ← alpha · b @ op(a)`` (``side="right"``). Only the
    ``lower`` (or upper) triangle of ``a`` is read; ``a`` and ``b`` must not overlap."""
    _, _, on_device = _triangular_operands("trmm", a, b, side)
    if not on_device:
        op = _triangle(a, lower, trans, unit_diagonal)
        b[...] = alpha * (op @ b if side == "left" else b @ op)
        return
    _triangular_call("trmm", a, b, side, lower, trans, unit_diagonal, alpha, stream)


def _triangular_operands(call: str, a: Any, b: Any, side: str
                         ) -> tuple[int, int, bool]:
    """(rows, columns of ``b``, on the device) after the checks of trsm and trmm."""
    if side not in ("left", "right"):
        raise ValueError(f"{call}: side must be 'left' or 'right', got {side!r}")
    on_device = _on_device(a, b)
    m, n = _shape(b, "b", 2)
    order = m if side == "left" else n
    if _shape(a, "a", 2) != (order, order):
        raise ValueError(f"{call}: a must be {order}x{order} for b {(m, n)} ({side}), "
                         f"got {_shape(a, 'a', 2)}")
    if not on_device:
        _dtype_of(a, b)
    return m, n, on_device


def _triangular_call(name: str, a: Any, b: Any, side: str, lower: bool, trans: bool,
                     unit: bool, alpha: float, stream: Any) -> None:
    """cuBLAS ``trsm`` or ``trmm`` on device operands, in place on ``b``.

    Row-major ``op(A) X = B`` is column-major ``Xᵀ op(A)ᵀ = Bᵀ``: the side flips, and
    ``A``'s memory is ``Aᵀ`` there, so its triangle flips and ``op`` stays (the same
    for the product). ``trmm`` is cuBLAS's out-of-place form, written into ``b``."""
    A, B = _Operand(a, "a", 2), _Operand(b, "b", 2)
    dtype = _dtype_of(A, B)
    m, n = B.shape
    if m == 0 or n == 0:
        return
    h = _handles(stream)
    out = (_ptr(B.ptr), B.ld) if name == "trmm" else ()
    _blas_ok(_blas(h, dtype, name)(
        h.blas, _RIGHT if side == "left" else _LEFT, _UPPER if lower else _LOWER,
        _OP_T if trans else _OP_N, _UNIT if unit else _NON_UNIT,
        n, m, _scalar(dtype, alpha), _ptr(A.ptr), A.ld, _ptr(B.ptr), B.ld, *out), name)


def _triangle(a: np.ndarray, lower: bool, trans: bool, unit: bool) -> np.ndarray:
    """``op`` of the triangle of a NumPy ``a``."""
    triangle = np.tril(a) if lower else np.triu(a)
    if unit:
        np.fill_diagonal(triangle, 1.0)
    return triangle.T if trans else triangle


def potrf(a: Any, *, info: Any = None, stream: Any = None) -> None:
    """Cholesky factor in place: the lower triangle of ``a`` ← ``L`` with
    ``L @ Lᵀ = a`` (only the lower triangle of ``a`` is read; the strictly upper one
    is left as it was).

    A matrix that is not positive definite: with NumPy, ``numpy.linalg.LinAlgError``;
    on CUDA nothing is raised (the call is asynchronous): ``info``, a one-element
    int32 array, gets cuSOLVER's code (0, or the order of the failing minor).
    """
    on_device = _on_device(a) if info is None else _on_device(a, info)
    n = _shape(a, "a", 2)[0]
    if _shape(a, "a", 2) != (n, n):
        raise ValueError(f"potrf: a must be square, got {_shape(a, 'a', 2)}")
    if info is not None and (_shape(info, "info", 1) != (1,)
                             or _dtype(info) != np.int32):
        raise ValueError("potrf: info must be a one-element int32 array")
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
    h = _handles(stream)
    solver = h.libs.cusolver
    prefix = "D" if dtype == np.float64 else "S"
    lwork = ctypes.c_int()
    # Row-major lower is column-major upper (a symmetric matrix is its transpose).
    _solver_ok(getattr(solver, f"cusolverDn{prefix}potrf_bufferSize")(
        h.solver, _UPPER, n, _ptr(A.ptr), A.ld, ctypes.byref(lwork)),
        "potrf_bufferSize")
    work = h.buffer("potrf", max(lwork.value, 1) * dtype.itemsize)
    info_ptr = (h.buffer("info", 4) if info is None
                else _Operand(info, "info", 1).ptr)
    _solver_ok(getattr(solver, f"cusolverDn{prefix}potrf")(
        h.solver, _UPPER, n, _ptr(A.ptr), A.ld, _ptr(work), lwork, _ptr(info_ptr)),
        "potrf")


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
    h = _handles(stream)
    cublas = h.libs.cublas
    _blas_ok(cublas.cublasSetPointerMode_v2(h.blas, _POINTER_DEVICE),
             "cublasSetPointerMode")
    try:
        _blas_ok(_blas(h, dtype, "dot")(
            h.blas, X.shape[0], _ptr(X.ptr), X.inc, _ptr(Y.ptr), Y.inc,
            _ptr(OUT.ptr)), "dot")
    finally:
        cublas.cublasSetPointerMode_v2(h.blas, _POINTER_HOST)
