"""The cuBLAS and cuSOLVER calls of :mod:`stflow.linalg` on CUDA arrays, through
nvmath-python's low-level bindings (``nvmath.bindings.cublas``,
``nvmath.bindings.cusolverDn``).

:mod:`stflow.linalg` checks the arguments and hands this module row-major operands
(:class:`Operand`: a device pointer, the row pitch, the element increment of a vector,
the batch stride); each function here makes the column-major call that computes the
same thing. A row-major matrix ``M`` (``rows × cols``, row pitch ``ld``) read in
column-major order is ``Mᵀ`` (``cols × rows``, leading dimension ``ld``), so:

- a product ``C = op(A) op(B)`` is the column-major ``Cᵀ = op(B)ᵀ op(A)ᵀ``: the two
  operands swap, ``m`` and ``n`` swap, and each operand keeps its own transpose flag
  (the library reads ``Bᵀ`` where ``B`` lies, and ``op`` of what it reads is
  ``op(B)ᵀ``);
- a triangle flips: the lower triangle of ``M`` is the upper triangle of ``Mᵀ``;
- a side flips: ``op(A) X = B`` is ``Xᵀ op(A)ᵀ = Bᵀ``, a solve from the right, with the
  same flag (``op(A)ᵀ`` of ``A``'s memory ``Aᵀ`` is ``op`` of what the library reads).

Handles
    One cuBLAS and one cuSOLVER handle per (thread, device, stream), created on first
    use, bound to their stream once and kept for the life of the process (a stream's
    handles are reused by later tasks on that stream; switching one handle between
    streams would cost host time at every task and reset cuBLAS's workspace). The
    thread is part of the key because a handle must not be used by two threads at
    once; a thread that ended leaves its handles to the next thread given its id.

Memory, and CUDA graphs
    Every call can be captured into a CUDA graph (stflow captures task bodies in
    relaxed mode). Each cuBLAS handle gets a workspace of its own
    (``cublasSetWorkspace``, after ``cublasSetStream``, which resets it): without one,
    cuBLAS allocates in stream order while a graph is captured, which records memory
    nodes, and a graph used as a child node or as a conditional node's body may not
    hold those. cuSOLVER's workspaces, and the ``info`` word when the caller passes
    none, are buffers of the handle, one per routine, grown to the next power of two
    when a call needs more and otherwise reused: a replayed graph keeps using the
    addresses it captured, so a buffer is never freed or replaced in place (a grown one
    is a new buffer; the old one stays allocated). The buffers come from
    ``cudaMalloc``, never from a stream-ordered pool, so a capture records no
    allocation. Scalars (``alpha``, ``beta``) are passed by host pointer: the library
    reads them during the call, so a captured call keeps the values of the capture.

Nothing here reads back to the host: ``dot`` writes its result on the device and the
cuSOLVER routines report failures in ``info``.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any, Callable, Protocol

import numpy as np

from ._core.errors import BackendUnavailableError, CudaError, OutOfMemoryError

__all__ = ["CUBLAS_WORKSPACE", "EXTRA", "Operand", "dot", "gemm", "gemm_batched",
           "gemv", "lauum", "potrf", "syrk", "trmm", "trsm", "trtri"]

EXTRA = "pip install 'stflow[linalg]'"
"""What to install for :mod:`stflow.linalg` on CUDA arrays (nvmath-python)."""

# cuBLAS, cuSOLVER and CUDA enumerations (cublas_api.h, library_types.h).
_OP_N, _OP_T = 0, 1
_LOWER, _UPPER = 0, 1
_LEFT, _RIGHT = 0, 1
_NON_UNIT, _UNIT = 0, 1
_POINTER_HOST, _POINTER_DEVICE = 0, 1
_CUDA_R_32F, _CUDA_R_64F = 0, 1
_CUDA_ERROR_MEMORY_ALLOCATION = 2

_F64 = np.dtype(np.float64)
_F32 = np.dtype(np.float32)

CUBLAS_WORKSPACE = 8 << 20
"""Bytes of cuBLAS workspace per handle (what large GEMM algorithms use on Hopper
fits; cuBLAS picks among the algorithms that fit)."""


class Operand(Protocol):
    """A row-major device operand, as :mod:`stflow.linalg` describes it."""

    ptr: int      # the device address of the first element
    ld: int       # elements from one row to the next (a matrix)
    inc: int      # elements from one entry to the next (a vector)
    stride: int   # elements from one matrix of a batch to the next (0: shared)


# -- the libraries ----------------------------------------------------------------

class _Libraries:
    """nvmath-python's cuBLAS and cuSOLVER bindings and the CUDA runtime
    (``cuda.bindings.runtime``, which nvmath-python depends on), loaded once."""

    def __init__(self) -> None:
        try:
            self.cublas: Any = importlib.import_module("nvmath.bindings.cublas")
            self.cusolver: Any = importlib.import_module("nvmath.bindings.cusolverDn")
            solver_status = importlib.import_module("nvmath.bindings.cusolver")
            self.runtime: Any = importlib.import_module("cuda.bindings.runtime")
        except ImportError as err:
            raise BackendUnavailableError(
                f"stflow.linalg on CUDA arrays calls cuBLAS and cuSOLVER through "
                f"nvmath-python, which could not be imported ({err}); install it: "
                f"{EXTRA}") from err
        self.blas_error: type[Exception] = self.cublas.cuBLASError
        self.solver_error: type[Exception] = solver_status.cuSOLVERError
        self.cupy: Any = None

    def blas(self, call: str, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)``, a cuBLAS failure raised as ``RuntimeError``."""
        try:
            return function(*args)
        except self.blas_error as err:
            raise RuntimeError(f"{call} failed: cuBLAS {err}") from err

    def solver(self, call: str, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)``, a cuSOLVER failure raised as ``RuntimeError``."""
        try:
            return function(*args)
        except self.solver_error as err:
            raise RuntimeError(f"{call} failed: cuSOLVER {err}") from err

    def current_stream(self) -> int:
        """CuPy's current stream (``t.run`` makes it the task's stream)."""
        if self.cupy is None:
            try:
                self.cupy = importlib.import_module("cupy")
            except ImportError as err:
                raise BackendUnavailableError(
                    "stflow.linalg without stream= runs on CuPy's current stream, and "
                    "CuPy is not installed: pass stream= (t.stream_ptr()) or pip "
                    "install 'stflow[cupy]'") from err
        return int(self.cupy.cuda.get_current_stream().ptr)

    def device(self) -> int:
        """The CUDA runtime's current device."""
        err, device = self.runtime.cudaGetDevice()
        if err:
            raise _runtime_error(err, "cudaGetDevice")
        return int(device)

    def malloc(self, nbytes: int) -> int:
        """``nbytes`` of device memory (``cudaMalloc``: not stream-ordered, so a
        capture in progress records nothing), never freed."""
        err, pointer = self.runtime.cudaMalloc(nbytes)
        if err:
            raise _runtime_error(err, f"cudaMalloc of {nbytes} bytes for a cuBLAS or "
                                      f"cuSOLVER workspace")
        return int(pointer)


def _runtime_error(err: Any, step: str) -> CudaError:
    code = int(err)
    if code == _CUDA_ERROR_MEMORY_ALLOCATION:
        return _LinalgOutOfMemory(f"stflow.linalg: {step} failed: out of device memory",
                                  str(err), code)
    return CudaError(f"stflow.linalg: {step} failed: {err}", str(err), code)


class _LinalgOutOfMemory(CudaError, OutOfMemoryError):
    """A workspace allocation ran out of device memory."""


# -- handles ----------------------------------------------------------------------

class _Handles:
    """The cuBLAS and cuSOLVER handles of one (thread, device, stream), and the buffers
    they use (see the module's notes: grown, never freed)."""

    def __init__(self, libs: _Libraries, stream: int) -> None:
        self.libs = libs
        self.stream = stream
        self.buffers: dict[str, list[tuple[int, int]]] = {}
        self.host_buffers: list[np.ndarray] = []
        self.sizes: dict[tuple[Any, ...], Any] = {}
        self.scalar_arrays: dict[np.dtype, np.ndarray] = {
            _F64: np.zeros(2, _F64), _F32: np.zeros(2, _F32)}
        self.scalar_ptrs = {dtype: int(array.__array_interface__["data"][0])
                            for dtype, array in self.scalar_arrays.items()}
        cublas, cusolver = libs.cublas, libs.cusolver
        self.blas = _create(libs, "cuBLAS", cublas.create)
        libs.blas("cublasSetStream", cublas.set_stream, self.blas, stream)
        # After cublasSetStream, which resets the workspace to cuBLAS's own pool.
        workspace = self.buffer("cublas", CUBLAS_WORKSPACE)
        libs.blas("cublasSetWorkspace", cublas.set_workspace, self.blas, workspace,
                  CUBLAS_WORKSPACE)
        self.solver = _create(libs, "cuSOLVER", cusolver.create)
        libs.solver("cusolverDnSetStream", cusolver.set_stream, self.solver, stream)

    def buffer(self, kind: str, nbytes: int) -> int:
        """A device buffer of at least ``nbytes`` for ``kind``: the one this handle
        holds, or, when it is too small, a new one of the next power of two (the old
        one stays allocated for the graphs that captured it)."""
        held = self.buffers.setdefault(kind, [])
        if not held or held[-1][1] < nbytes:
            size = 1 << max(8, (max(nbytes, 1) - 1).bit_length())
            held.append((self.libs.malloc(size), size))
        return held[-1][0]

    def host_buffer(self, nbytes: int) -> int:
        """A host buffer of at least ``nbytes`` (cuSOLVER's host workspace), 0 for
        none; kept like the device buffers."""
        if nbytes <= 0:
            return 0
        held = self.host_buffers
        if not held or held[-1].nbytes < nbytes:
            held.append(np.zeros(1 << max(8, (nbytes - 1).bit_length()), np.uint8))
        return int(held[-1].__array_interface__["data"][0])

    def scalars(self, dtype: np.dtype, alpha: float, beta: float = 0.0
                ) -> tuple[int, int]:
        """Host pointers to ``alpha`` and ``beta`` in ``dtype`` (read by the library
        during the call; the next call of this handle overwrites them)."""
        array = self.scalar_arrays[dtype]
        array[0] = alpha
        array[1] = beta
        pointer = self.scalar_ptrs[dtype]
        return pointer, pointer + dtype.itemsize

    def size(self, key: tuple[Any, ...], call: str, function: Callable[..., Any],
             *args: Any) -> Any:
        """A cuSOLVER buffer-size query, asked once per ``key`` (routine, type,
        triangle, order, leading dimension)."""
        found = self.sizes.get(key)
        if found is None:
            found = self.sizes[key] = self.libs.solver(call, function, *args)
        return found

    def info(self, info: int | None) -> int:
        """``info``'s address, or this handle's own ``info`` word when ``None``."""
        return self.buffer("info", 4) if info is None else info


def _create(libs: _Libraries, library: str, create: Callable[[], int]) -> int:
    """A new handle; a library that cannot be loaded named with how to get it."""
    error = libs.blas_error if library == "cuBLAS" else libs.solver_error
    try:
        return int(create())
    except error as err:
        raise RuntimeError(f"creating a {library} handle failed: {library} {err}") \
            from err
    except Exception as err:      # the library itself is missing or unusable
        raise BackendUnavailableError(
            f"stflow.linalg: nvmath-python could not load {library} "
            f"({type(err).__name__}: {err}); it finds the libraries of NVIDIA's "
            f"wheels (pip install 'stflow[cu12]' or 'stflow[cu13]') or of a CUDA "
            f"toolkit") from err


_LIBRARIES: _Libraries | None = None
_HANDLES: dict[tuple[int, int, int], _Handles] = {}
_LOCK = threading.Lock()


def handles(stream: int | None) -> _Handles:
    """The handles of this thread and of the current device, bound to ``stream``
    (CuPy's current stream when ``None``)."""
    global _LIBRARIES
    libs = _LIBRARIES
    if libs is None:
        with _LOCK:
            if _LIBRARIES is None:
                _LIBRARIES = _Libraries()
            libs = _LIBRARIES
    if stream is None:
        stream = libs.current_stream()
    key = (threading.get_ident(), libs.device(), stream)
    found = _HANDLES.get(key)
    if found is None:
        with _LOCK:
            found = _HANDLES.get(key)
            if found is None:
                found = _HANDLES[key] = _Handles(libs, stream)
    return found


def _op(trans: bool) -> int:
    return _OP_T if trans else _OP_N


def _blas_function(h: _Handles, dtype: np.dtype, name: str) -> Any:
    """``cublas.d{name}`` or ``cublas.s{name}`` for ``dtype``."""
    return getattr(h.libs.cublas, ("d" if dtype == _F64 else "s") + name)


def _solver_function(h: _Handles, dtype: np.dtype, name: str) -> Any:
    return getattr(h.libs.cusolver, ("d" if dtype == _F64 else "s") + name)


# -- cuBLAS -----------------------------------------------------------------------

def gemm(stream: int | None, dtype: np.dtype, trans_a: bool, trans_b: bool,
         m: int, n: int, k: int, alpha: float, a: Operand, b: Operand, beta: float,
         c: Operand) -> None:
    """Row-major ``c (m × n) ← alpha · op(a) @ op(b) + beta · c``."""
    h = handles(stream)
    alpha_ptr, beta_ptr = h.scalars(dtype, alpha, beta)
    # Column-major Cᵀ (n × m) = op(B)ᵀ op(A)ᵀ: b first, each with its own flag.
    h.libs.blas("gemm", _blas_function(h, dtype, "gemm"),
                h.blas, _op(trans_b), _op(trans_a), n, m, k, alpha_ptr,
                b.ptr, b.ld, a.ptr, a.ld, beta_ptr, c.ptr, c.ld)


def gemm_batched(stream: int | None, dtype: np.dtype, trans_a: bool, trans_b: bool,
                 m: int, n: int, k: int, alpha: float, a: Operand, b: Operand,
                 beta: float, c: Operand, count: int) -> None:
    """``count`` row-major products ``c[i] ← alpha · op(a[i]) @ op(b[i]) + beta ·
    c[i]``, the matrices ``stride`` elements apart (``cublas{D,S}gemmStridedBatched``;
    a stride of 0 uses one matrix for every product)."""
    h = handles(stream)
    alpha_ptr, beta_ptr = h.scalars(dtype, alpha, beta)
    # As gemm, for each matrix of the batch: b first, n × m.
    h.libs.blas("gemm_batched", _blas_function(h, dtype, "gemm_strided_batched"),
                h.blas, _op(trans_b), _op(trans_a), n, m, k, alpha_ptr,
                b.ptr, b.ld, b.stride, a.ptr, a.ld, a.stride, beta_ptr,
                c.ptr, c.ld, c.stride, count)


def gemv(stream: int | None, dtype: np.dtype, trans: bool, rows: int, cols: int,
         alpha: float, a: Operand, x: Operand, beta: float, y: Operand) -> None:
    """``y ← alpha · op(a) @ x + beta · y``, ``a`` row-major ``rows × cols``."""
    h = handles(stream)
    alpha_ptr, beta_ptr = h.scalars(dtype, alpha, beta)
    # The library reads aᵀ (cols × rows): a @ x is (aᵀ)ᵀ @ x, so the flag flips.
    h.libs.blas("gemv", _blas_function(h, dtype, "gemv"),
                h.blas, _op(not trans), cols, rows, alpha_ptr, a.ptr, a.ld,
                x.ptr, x.inc, beta_ptr, y.ptr, y.inc)


def syrk(stream: int | None, dtype: np.dtype, trans: bool, n: int, k: int,
         alpha: float, a: Operand, beta: float, c: Operand) -> None:
    """The row-major lower triangle of ``c (n × n) ← alpha · a @ aᵀ + beta · c``
    (``trans``: ``aᵀ @ a``)."""
    h = handles(stream)
    alpha_ptr, beta_ptr = h.scalars(dtype, alpha, beta)
    # Row-major lower is column-major upper. The library reads X = aᵀ (k × n without
    # trans): a @ aᵀ is Xᵀ X, its transposed form; aᵀ @ a is X Xᵀ, its plain one.
    h.libs.blas("syrk", _blas_function(h, dtype, "syrk"),
                h.blas, _UPPER, _op(not trans), n, k, alpha_ptr, a.ptr, a.ld,
                beta_ptr, c.ptr, c.ld)


def trsm(stream: int | None, dtype: np.dtype, left: bool, lower: bool, trans: bool,
         unit: bool, m: int, n: int, alpha: float, a: Operand, b: Operand) -> None:
    """Row-major ``b (m × n) ← alpha · op(a)⁻¹ @ b`` (``left``) or ``alpha · b @
    op(a)⁻¹``, with the ``lower`` (or upper) triangle of ``a``."""
    h = handles(stream)
    alpha_ptr, _ = h.scalars(dtype, alpha)
    # op(A) X = B is Xᵀ op(A)ᵀ = Bᵀ: the side and the triangle flip, op stays, and
    # the library sees bᵀ, n × m.
    h.libs.blas("trsm", _blas_function(h, dtype, "trsm"),
                h.blas, _RIGHT if left else _LEFT, _UPPER if lower else _LOWER,
                _op(trans), _UNIT if unit else _NON_UNIT, n, m, alpha_ptr,
                a.ptr, a.ld, b.ptr, b.ld)


def trmm(stream: int | None, dtype: np.dtype, left: bool, lower: bool, trans: bool,
         unit: bool, m: int, n: int, alpha: float, a: Operand, b: Operand) -> None:
    """Row-major ``b (m × n) ← alpha · op(a) @ b`` (``left``) or ``alpha · b @
    op(a)``, with the ``lower`` (or upper) triangle of ``a``."""
    h = handles(stream)
    alpha_ptr, _ = h.scalars(dtype, alpha)
    # The flips of trsm. cuBLAS's trmm writes a separate output: b again (in place).
    h.libs.blas("trmm", _blas_function(h, dtype, "trmm"),
                h.blas, _RIGHT if left else _LEFT, _UPPER if lower else _LOWER,
                _op(trans), _UNIT if unit else _NON_UNIT, n, m, alpha_ptr,
                a.ptr, a.ld, b.ptr, b.ld, b.ptr, b.ld)


def dot(stream: int | None, dtype: np.dtype, n: int, x: Operand, y: Operand,
        out: Operand) -> None:
    """``out ← x · y``, written on the device (cuBLAS in device pointer mode for the
    call)."""
    h = handles(stream)
    libs, cublas = h.libs, h.libs.cublas
    libs.blas("cublasSetPointerMode", cublas.set_pointer_mode, h.blas, _POINTER_DEVICE)
    try:
        libs.blas("dot", _blas_function(h, dtype, "dot"),
                  h.blas, n, x.ptr, x.inc, y.ptr, y.inc, out.ptr)
    finally:
        libs.blas("cublasSetPointerMode", cublas.set_pointer_mode, h.blas,
                  _POINTER_HOST)


# -- cuSOLVER ---------------------------------------------------------------------

def potrf(stream: int | None, dtype: np.dtype, n: int, a: Operand,
          info: int | None) -> None:
    """Cholesky factor of the row-major lower triangle of ``a``, in place; cuSOLVER's
    code in ``info`` (an int32 device address; the handle's own word when ``None``)."""
    h = handles(stream)
    # Row-major lower is column-major upper; the library factors M = Uᵀ U there, and
    # U read row-major is L = Uᵀ with L Lᵀ = M (a symmetric matrix is its transpose).
    lwork = h.size(("potrf", dtype.char, _UPPER, n, a.ld), "potrf_bufferSize",
                   _solver_function(h, dtype, "potrf_buffer_size"),
                   h.solver, _UPPER, n, a.ptr, a.ld)
    work = h.buffer("potrf", max(int(lwork), 1) * dtype.itemsize)
    h.libs.solver("potrf", _solver_function(h, dtype, "potrf"),
                  h.solver, _UPPER, n, a.ptr, a.ld, work, lwork, h.info(info))


def trtri(stream: int | None, dtype: np.dtype, n: int, lower: bool, unit: bool,
          a: Operand, info: int | None) -> None:
    """The row-major ``lower`` (or upper) triangle of ``a`` ← its inverse, in place
    (``cusolverDnXtrtri``); ``info`` as in :func:`potrf` (``i``: ``a[i-1, i-1]`` is
    zero)."""
    h = handles(stream)
    # The lower triangle L read column-major is Lᵀ, upper; its inverse (L⁻¹)ᵀ read
    # back row-major is L⁻¹: the triangle flips, the diagonal kind stays.
    uplo, diag = _UPPER if lower else _LOWER, _UNIT if unit else _NON_UNIT
    kind = _CUDA_R_64F if dtype == _F64 else _CUDA_R_32F
    cusolver = h.libs.cusolver
    device_bytes, host_bytes = h.size(
        ("trtri", dtype.char, uplo, diag, n, a.ld), "trtri_bufferSize",
        cusolver.xtrtri_buffer_size, h.solver, uplo, diag, n, kind, a.ptr, a.ld)
    work = h.buffer("trtri", int(device_bytes))
    host = h.host_buffer(int(host_bytes))
    h.libs.solver("trtri", cusolver.xtrtri,
                  h.solver, uplo, diag, n, kind, a.ptr, a.ld, work, device_bytes,
                  host, host_bytes, h.info(info))


def lauum(stream: int | None, dtype: np.dtype, n: int, lower: bool,
          a: Operand) -> None:
    """The row-major lower triangle ``L`` of ``a`` ← that of ``Lᵀ L`` (``lower``), or
    the upper ``U`` ← that of ``U Uᵀ``, in place (``cusolverDn{D,S}lauum``)."""
    h = handles(stream)
    # Row-major L is column-major Lᵀ = U', upper, for which the library computes
    # U' U'ᵀ = Lᵀ L, symmetric, in its upper triangle: our lower one (and the other
    # way round for an upper U).
    uplo = _UPPER if lower else _LOWER
    lwork = h.size(("lauum", dtype.char, uplo, n, a.ld), "lauum_bufferSize",
                   _solver_function(h, dtype, "lauum_buffer_size"),
                   h.solver, uplo, n, a.ptr, a.ld)
    work = h.buffer("lauum", max(int(lwork), 1) * dtype.itemsize)
    h.libs.solver("lauum", _solver_function(h, dtype, "lauum"),
                  h.solver, uplo, n, a.ptr, a.ld, work, lwork, h.info(None))
