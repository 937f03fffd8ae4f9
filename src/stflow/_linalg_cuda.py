"""The cuBLAS and cuSOLVER calls of :mod:`stflow.linalg` on CUDA arrays, through
nvmath-python's low-level bindings (``nvmath.bindings.cublas``,
``nvmath.bindings.cusolverDn``).

:mod:`stflow.linalg` checks the arguments and hands this module row-major operands as
plain integers (a device pointer with the row pitch, the element increment of a vector
or the batch stride); each function here makes the column-major call that computes the
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
    One cuBLAS and one cuSOLVER handle per (thread, stream), created on first use,
    bound to their stream once and kept for the life of the process (a stream's
    handles are reused by later tasks on that stream; switching one handle between
    streams would cost host time at every task and reset cuBLAS's workspace). The
    thread is part of the key because a handle must not be used by two threads at
    once; a thread that ended leaves its handles to the next thread given its id. A
    stream belongs to one device, so the stream handle finds its handles without a
    device query; the streams every device has (0, ``cudaStreamLegacy``,
    ``cudaStreamPerThread``) are told apart by the current device. Each thread keeps
    its handles by stream in a cache of its own, so a call with ``stream=`` given
    looks up one dictionary entry.

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
    allocation. Scalars (``alpha``, ``beta``) are passed by host pointer, written into
    a pair of host numbers of the handle before each call: the library reads them
    during the call, so a captured call keeps the values of the capture.

Nothing here reads back to the host: ``dot`` writes its result on the device and the
cuSOLVER routines report failures in ``info``.
"""

from __future__ import annotations

import array
import importlib
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ._core.errors import BackendUnavailableError, CudaError, OutOfMemoryError

__all__ = [
    "CUBLAS_WORKSPACE",
    "EXTRA",
    "dot",
    "gemm",
    "gemm_batched",
    "gemv",
    "handles",
    "lauum",
    "potrf",
    "syrk",
    "trmm",
    "trsm",
    "trtri",
]

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

# The streams every device has, told apart by the current device (cudaStreamLegacy,
# cudaStreamPerThread, and 0, the legacy default).
_DEVICE_DEFAULT_STREAMS = (0, 1, 2)

CUBLAS_WORKSPACE = 8 << 20
"""Bytes of cuBLAS workspace per handle (what large GEMM algorithms use on Hopper
fits; cuBLAS picks among the algorithms that fit)."""

# The binding functions looked up once, as (float32, float64) pairs: ``pair[is64]``.
_BLAS_PAIRS = (
    "gemm",
    "gemm_strided_batched",
    "gemv",
    "syrk",
    "trsm",
    "trmm",
    "dot",
    "copy",
)
_SOLVER_PAIRS = ("potrf", "potrf_buffer_size", "lauum", "lauum_buffer_size")


# -- the libraries ----------------------------------------------------------------


class _Libraries:
    """nvmath-python's cuBLAS and cuSOLVER bindings and the CUDA runtime
    (``cuda.bindings.runtime``, which nvmath-python depends on), loaded once, with
    the functions of each routine for float32 and float64 (``self.pairs[name]``)."""

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
                f"{EXTRA}"
            ) from err
        self.blas_error: type[Exception] = self.cublas.cuBLASError
        self.solver_error: type[Exception] = solver_status.cuSOLVERError
        self.pairs: dict[str, tuple[Any, Any]] = {}
        for names, module in ((_BLAS_PAIRS, self.cublas), (_SOLVER_PAIRS, self.cusolver)):
            for name in names:
                self.pairs[name] = (
                    getattr(module, "s" + name),
                    getattr(module, "d" + name),
                )
        self.current: Callable[[], Any] | None = None

    def current_stream(self) -> int:
        """CuPy's current stream (``t.run`` makes it the task's stream)."""
        current = self.current
        if current is None:
            try:
                cupy = importlib.import_module("cupy")
            except ImportError as err:
                raise BackendUnavailableError(
                    "stflow.linalg without stream= runs on CuPy's current stream, and "
                    "CuPy is not installed: pass stream= (t.stream_ptr()) or pip "
                    "install 'stflow[cupy]'"
                ) from err
            current = self.current = cupy.cuda.get_current_stream
        return int(current().ptr)

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
            raise _runtime_error(
                err, f"cudaMalloc of {nbytes} bytes for a cuBLAS or cuSOLVER workspace"
            )
        return int(pointer)


def _runtime_error(err: Any, step: str) -> CudaError:
    code = int(err)
    if code == _CUDA_ERROR_MEMORY_ALLOCATION:
        return _LinalgOutOfMemory(
            f"stflow.linalg: {step} failed: out of device memory", str(err), code
        )
    return CudaError(f"stflow.linalg: {step} failed: {err}", str(err), code)


class _LinalgOutOfMemory(CudaError, OutOfMemoryError):
    """A workspace allocation ran out of device memory."""


def _blas_failed(call: str, err: Exception) -> RuntimeError:
    return RuntimeError(f"{call} failed: cuBLAS {err}")


def _solver_failed(call: str, err: Exception) -> RuntimeError:
    return RuntimeError(f"{call} failed: cuSOLVER {err}")


# -- handles ----------------------------------------------------------------------


class _Handles:
    """The cuBLAS and cuSOLVER handles of one (thread, stream), and the buffers they
    use (see the module's notes: grown, never freed)."""

    def __init__(self, libs: _Libraries, stream: int) -> None:
        self.libs = libs
        self.stream = stream
        self.current: dict[str, tuple[int, int]] = {}  # kind -> (pointer, bytes)
        self.held: list[tuple[str, int, int]] = []  # every buffer made
        self.host_buffers: list[np.ndarray] = []
        self.host_pointer = 0
        self.sizes: dict[tuple[Any, ...], Any] = {}
        self.info_word = 0
        # alpha and beta, written before each call: [float32 pair, float64 pair].
        self.scalars = (array.array("f", (0.0, 0.0)), array.array("d", (0.0, 0.0)))
        self.scalar_ptrs = tuple(int(s.buffer_info()[0]) for s in self.scalars)
        cublas, cusolver = libs.cublas, libs.cusolver
        self.blas = _create(libs, "cuBLAS", cublas.create)
        _blas_setup(libs, "cublasSetStream", cublas.set_stream, self.blas, stream)
        # After cublasSetStream, which resets the workspace to cuBLAS's own pool.
        workspace = self.buffer("cublas", CUBLAS_WORKSPACE)
        _blas_setup(
            libs,
            "cublasSetWorkspace",
            cublas.set_workspace,
            self.blas,
            workspace,
            CUBLAS_WORKSPACE,
        )
        self.solver = _create(libs, "cuSOLVER", cusolver.create)
        try:
            cusolver.set_stream(self.solver, stream)
        except libs.solver_error as err:
            raise _solver_failed("cusolverDnSetStream", err) from err

    def buffer(self, kind: str, nbytes: int) -> int:
        """A device buffer of at least ``nbytes`` for ``kind``: the one this handle
        holds, or, when it is too small, a new one of the next power of two (the old
        one stays allocated for the graphs that captured it)."""
        found = self.current.get(kind)
        if found is not None and found[1] >= nbytes:
            return found[0]
        size = 1 << max(8, (max(nbytes, 1) - 1).bit_length())
        pointer = self.libs.malloc(size)
        self.held.append((kind, pointer, size))
        self.current[kind] = (pointer, size)
        return pointer

    def host_buffer(self, nbytes: int) -> int:
        """A host buffer of at least ``nbytes`` (cuSOLVER's host workspace), 0 for
        none; kept like the device buffers."""
        if nbytes <= 0:
            return 0
        held = self.host_buffers
        if not held or held[-1].nbytes < nbytes:
            held.append(np.zeros(1 << max(8, (nbytes - 1).bit_length()), np.uint8))
            self.host_pointer = int(held[-1].__array_interface__["data"][0])
        return self.host_pointer

    def size(
        self, key: tuple[Any, ...], call: str, function: Callable[..., Any], *args: Any
    ) -> Any:
        """A cuSOLVER buffer-size query, asked once per ``key`` (routine, type,
        triangle, order, leading dimension)."""
        found = self.sizes.get(key)
        if found is None:
            try:
                found = self.sizes[key] = function(*args)
            except self.libs.solver_error as err:
                raise _solver_failed(call, err) from err
        return found

    def info(self) -> int:
        """This handle's own ``info`` word (for calls given none)."""
        word = self.info_word
        if not word:
            word = self.info_word = self.buffer("info", 4)
        return word


def _blas_setup(
    libs: _Libraries, call: str, function: Callable[..., Any], *args: Any
) -> None:
    try:
        function(*args)
    except libs.blas_error as err:
        raise _blas_failed(call, err) from err


def _create(libs: _Libraries, library: str, create: Callable[[], int]) -> int:
    """A new handle; a library that cannot be loaded named with how to get it."""
    error = libs.blas_error if library == "cuBLAS" else libs.solver_error
    try:
        return int(create())
    except error as err:
        raise RuntimeError(
            f"creating a {library} handle failed: {library} {err}"
        ) from err
    except Exception as err:  # the library itself is missing or unusable
        raise BackendUnavailableError(
            f"stflow.linalg: nvmath-python could not load {library} "
            f"({type(err).__name__}: {err}); it finds the libraries of NVIDIA's "
            f"wheels (pip install 'stflow[cu12]' or 'stflow[cu13]') or of a CUDA "
            f"toolkit"
        ) from err


class _ThreadCache(threading.local):
    """This thread's handles by stream, in front of :data:`_HANDLES` (valid while
    ``registry`` is the registry they were found in)."""

    def __init__(self) -> None:
        self.registry: dict[tuple[int, int, int], _Handles] | None = None
        self.by_stream: dict[int, _Handles] = {}


_LIBRARIES: _Libraries | None = None
_HANDLES: dict[tuple[int, int, int], _Handles] = {}
"""Every handle pair made, by (thread id, device or -1, stream)."""
_CACHE = _ThreadCache()
_LOCK = threading.Lock()


def handles(stream: int | None) -> _Handles:
    """This thread's handles bound to ``stream`` (CuPy's current stream when
    ``None``).

    A stream belongs to one device, so a stream handle alone finds its handles, with
    no device query; the streams every device has (0, ``cudaStreamLegacy``,
    ``cudaStreamPerThread``) are told apart by the current device."""
    cache = _CACHE
    libs = _LIBRARIES
    if libs is None or cache.registry is not _HANDLES:
        libs = _start(cache)
    if stream is None:
        stream = libs.current_stream()
    found = cache.by_stream.get(stream)
    if found is None:
        found = _find(libs, cache, stream)
    return found


def _start(cache: _ThreadCache) -> _Libraries:
    """The libraries, loaded on first use, and this thread's cache emptied when the
    registry changed (tests replace it)."""
    global _LIBRARIES
    with _LOCK:
        if _LIBRARIES is None:
            _LIBRARIES = _Libraries()
        libs = _LIBRARIES
    if cache.registry is not _HANDLES:
        cache.registry = _HANDLES
        cache.by_stream = {}
    return libs


def _find(libs: _Libraries, cache: _ThreadCache, stream: int) -> _Handles:
    """The handles of (this thread, ``stream``) from the registry, made when missing;
    those of a stream of every device are not cached by stream alone."""
    shared = stream in _DEVICE_DEFAULT_STREAMS
    key = (threading.get_ident(), libs.device() if shared else -1, stream)
    found = _HANDLES.get(key)
    if found is None:
        with _LOCK:
            found = _HANDLES.get(key)
            if found is None:
                found = _HANDLES[key] = _Handles(libs, stream)
    if not shared:
        cache.by_stream[stream] = found
    return found


# -- cuBLAS -----------------------------------------------------------------------
# Operands are device addresses with their row pitch ``ld`` (matrices), element
# increment ``inc`` (vectors) and batch stride (elements), all row-major; ``is64``
# picks float64 over float32. Scalars are written to the handle's host pair.


def gemm(
    stream: int | None,
    is64: bool,
    trans_a: bool,
    trans_b: bool,
    m: int,
    n: int,
    k: int,
    alpha: float,
    a: int,
    lda: int,
    b: int,
    ldb: int,
    beta: float,
    c: int,
    ldc: int,
) -> None:
    """Row-major ``c (m × n) ← alpha · op(a) @ op(b) + beta · c``."""
    h = handles(stream)
    scalars = h.scalars[is64]
    scalars[0] = alpha
    scalars[1] = beta
    pointer = h.scalar_ptrs[is64]
    # Column-major Cᵀ (n × m) = op(B)ᵀ op(A)ᵀ: b first, each with its own flag.
    try:
        h.libs.pairs["gemm"][is64](
            h.blas,
            _OP_T if trans_b else _OP_N,
            _OP_T if trans_a else _OP_N,
            n,
            m,
            k,
            pointer,
            b,
            ldb,
            a,
            lda,
            pointer + (8 if is64 else 4),
            c,
            ldc,
        )
    except h.libs.blas_error as err:
        raise _blas_failed("gemm", err) from err


def gemm_batched(
    stream: int | None,
    is64: bool,
    trans_a: bool,
    trans_b: bool,
    m: int,
    n: int,
    k: int,
    alpha: float,
    a: tuple[int, int, int],
    b: tuple[int, int, int],
    beta: float,
    c: tuple[int, int, int],
    count: int,
) -> None:
    """``count`` row-major products ``c[i] ← alpha · op(a[i]) @ op(b[i]) + beta ·
    c[i]``, each operand (pointer, ld, batch stride in elements)
    (``cublas{D,S}gemmStridedBatched``; a stride of 0 uses one matrix for every
    product)."""
    h = handles(stream)
    scalars = h.scalars[is64]
    scalars[0] = alpha
    scalars[1] = beta
    pointer = h.scalar_ptrs[is64]
    # As gemm, for each matrix of the batch: b first, n × m.
    try:
        h.libs.pairs["gemm_strided_batched"][is64](
            h.blas,
            _OP_T if trans_b else _OP_N,
            _OP_T if trans_a else _OP_N,
            n,
            m,
            k,
            pointer,
            *b,
            *a,
            pointer + (8 if is64 else 4),
            *c,
            count,
        )
    except h.libs.blas_error as err:
        raise _blas_failed("gemm_batched", err) from err


def gemv(
    stream: int | None,
    is64: bool,
    trans: bool,
    rows: int,
    cols: int,
    alpha: float,
    a: int,
    lda: int,
    x: int,
    incx: int,
    beta: float,
    y: int,
    incy: int,
) -> None:
    """``y ← alpha · op(a) @ x + beta · y``, ``a`` row-major ``rows × cols``."""
    h = handles(stream)
    scalars = h.scalars[is64]
    scalars[0] = alpha
    scalars[1] = beta
    pointer = h.scalar_ptrs[is64]
    # The library reads aᵀ (cols × rows): a @ x is (aᵀ)ᵀ @ x, so the flag flips.
    try:
        h.libs.pairs["gemv"][is64](
            h.blas,
            _OP_N if trans else _OP_T,
            cols,
            rows,
            pointer,
            a,
            lda,
            x,
            incx,
            pointer + (8 if is64 else 4),
            y,
            incy,
        )
    except h.libs.blas_error as err:
        raise _blas_failed("gemv", err) from err


def syrk(
    stream: int | None,
    is64: bool,
    trans: bool,
    n: int,
    k: int,
    alpha: float,
    a: int,
    lda: int,
    beta: float,
    c: int,
    ldc: int,
) -> None:
    """The row-major lower triangle of ``c (n × n) ← alpha · a @ aᵀ + beta · c``
    (``trans``: ``aᵀ @ a``)."""
    h = handles(stream)
    scalars = h.scalars[is64]
    scalars[0] = alpha
    scalars[1] = beta
    pointer = h.scalar_ptrs[is64]
    # Row-major lower is column-major upper. The library reads X = aᵀ (k × n without
    # trans): a @ aᵀ is Xᵀ X, its transposed form; aᵀ @ a is X Xᵀ, its plain one.
    try:
        h.libs.pairs["syrk"][is64](
            h.blas,
            _UPPER,
            _OP_N if trans else _OP_T,
            n,
            k,
            pointer,
            a,
            lda,
            pointer + (8 if is64 else 4),
            c,
            ldc,
        )
    except h.libs.blas_error as err:
        raise _blas_failed("syrk", err) from err


def trsm(
    stream: int | None,
    is64: bool,
    left: bool,
    lower: bool,
    trans: bool,
    unit: bool,
    m: int,
    n: int,
    alpha: float,
    a: int,
    lda: int,
    b: int,
    ldb: int,
) -> None:
    """Row-major ``b (m × n) ← alpha · op(a)⁻¹ @ b`` (``left``) or ``alpha · b @
    op(a)⁻¹``, with the ``lower`` (or upper) triangle of ``a``."""
    h = handles(stream)
    h.scalars[is64][0] = alpha
    # op(A) X = B is Xᵀ op(A)ᵀ = Bᵀ: the side and the triangle flip, op stays, and
    # the library sees bᵀ, n × m.
    try:
        h.libs.pairs["trsm"][is64](
            h.blas,
            _RIGHT if left else _LEFT,
            _UPPER if lower else _LOWER,
            _OP_T if trans else _OP_N,
            _UNIT if unit else _NON_UNIT,
            n,
            m,
            h.scalar_ptrs[is64],
            a,
            lda,
            b,
            ldb,
        )
    except h.libs.blas_error as err:
        raise _blas_failed("trsm", err) from err


def trmm(
    stream: int | None,
    is64: bool,
    left: bool,
    lower: bool,
    trans: bool,
    unit: bool,
    m: int,
    n: int,
    alpha: float,
    a: int,
    lda: int,
    b: int,
    ldb: int,
) -> None:
    """Row-major ``b (m × n) ← alpha · op(a) @ b`` (``left``) or ``alpha · b @
    op(a)``, with the ``lower`` (or upper) triangle of ``a``."""
    h = handles(stream)
    h.scalars[is64][0] = alpha
    # The flips of trsm. cuBLAS's trmm writes a separate output: b again (in place).
    try:
        h.libs.pairs["trmm"][is64](
            h.blas,
            _RIGHT if left else _LEFT,
            _UPPER if lower else _LOWER,
            _OP_T if trans else _OP_N,
            _UNIT if unit else _NON_UNIT,
            n,
            m,
            h.scalar_ptrs[is64],
            a,
            lda,
            b,
            ldb,
            b,
            ldb,
        )
    except h.libs.blas_error as err:
        raise _blas_failed("trmm", err) from err


def dot(
    stream: int | None, is64: bool, n: int, x: int, incx: int, y: int, incy: int, out: int
) -> None:
    """``out ← x · y``, written on the device (cuBLAS in device pointer mode for the
    call)."""
    h = handles(stream)
    libs, cublas = h.libs, h.libs.cublas
    _blas_setup(
        libs, "cublasSetPointerMode", cublas.set_pointer_mode, h.blas, _POINTER_DEVICE
    )
    try:
        _blas_setup(
            libs, "dot", libs.pairs["dot"][is64], h.blas, n, x, incx, y, incy, out
        )
    finally:
        _blas_setup(
            libs, "cublasSetPointerMode", cublas.set_pointer_mode, h.blas, _POINTER_HOST
        )


# -- cuSOLVER ---------------------------------------------------------------------


def potrf(
    stream: int | None, is64: bool, n: int, a: int, lda: int, info: int | None
) -> None:
    """Cholesky factor of the row-major lower triangle of ``a``, in place; cuSOLVER's
    code in ``info`` (an int32 device address; the handle's own word when ``None``)."""
    h = handles(stream)
    pairs = h.libs.pairs
    # Row-major lower is column-major upper; the library factors M = Uᵀ U there, and
    # U read row-major is L = Uᵀ with L Lᵀ = M (a symmetric matrix is its transpose).
    lwork = h.size(
        ("potrf", is64, n, lda),
        "potrf_bufferSize",
        pairs["potrf_buffer_size"][is64],
        h.solver,
        _UPPER,
        n,
        a,
        lda,
    )
    work = h.buffer("potrf", max(int(lwork), 1) * (8 if is64 else 4))
    try:
        pairs["potrf"][is64](
            h.solver, _UPPER, n, a, lda, work, lwork, h.info() if info is None else info
        )
    except h.libs.solver_error as err:
        raise _solver_failed("potrf", err) from err


def trtri(
    stream: int | None,
    is64: bool,
    n: int,
    lower: bool,
    unit: bool,
    a: int,
    lda: int,
    info: int | None,
) -> None:
    """The row-major ``lower`` (or upper) triangle of ``a`` ← its inverse, in place
    (``cusolverDnXtrtri``); ``info`` as in :func:`potrf` (``i``: ``a[i-1, i-1]`` is
    zero). With ``unit``, cuSOLVER writes ones on the diagonal: the diagonal is saved
    to a buffer of the handle before the call and copied back after it (two strided
    ``cublas{D,S}copy`` on the same stream, so a capture records them too)."""
    h = handles(stream)
    # The lower triangle L read column-major is Lᵀ, upper; its inverse (L⁻¹)ᵀ read
    # back row-major is L⁻¹: the triangle flips, the diagonal kind stays.
    uplo, diag = _UPPER if lower else _LOWER, _UNIT if unit else _NON_UNIT
    kind = _CUDA_R_64F if is64 else _CUDA_R_32F
    cusolver = h.libs.cusolver
    device_bytes, host_bytes = h.size(
        ("trtri", is64, uplo, diag, n, lda),
        "trtri_bufferSize",
        cusolver.xtrtri_buffer_size,
        h.solver,
        uplo,
        diag,
        n,
        kind,
        a,
        lda,
    )
    work = h.buffer("trtri", int(device_bytes))
    host = h.host_buffer(int(host_bytes))
    word = h.info() if info is None else info
    if unit:
        # The diagonal of a row-major matrix of pitch lda: every (lda + 1)-th element.
        saved = h.buffer("diagonal", n * (8 if is64 else 4))
        copy = h.libs.pairs["copy"][is64]
        _blas_setup(
            h.libs, "trtri (saving the diagonal)", copy, h.blas, n, a, lda + 1, saved, 1
        )
    try:
        cusolver.xtrtri(
            h.solver,
            uplo,
            diag,
            n,
            kind,
            a,
            lda,
            work,
            device_bytes,
            host,
            host_bytes,
            word,
        )
    except h.libs.solver_error as err:
        raise _solver_failed("trtri", err) from err
    if unit:
        _blas_setup(
            h.libs,
            "trtri (restoring the diagonal)",
            copy,
            h.blas,
            n,
            saved,
            1,
            a,
            lda + 1,
        )


def lauum(stream: int | None, is64: bool, n: int, lower: bool, a: int, lda: int) -> None:
    """The row-major lower triangle ``L`` of ``a`` ← that of ``Lᵀ L`` (``lower``), or
    the upper ``U`` ← that of ``U Uᵀ``, in place (``cusolverDn{D,S}lauum``)."""
    h = handles(stream)
    pairs = h.libs.pairs
    # Row-major L is column-major Lᵀ = U', upper, for which the library computes
    # U' U'ᵀ = Lᵀ L, symmetric, in its upper triangle: our lower one (and the other
    # way round for an upper U).
    uplo = _UPPER if lower else _LOWER
    lwork = h.size(
        ("lauum", is64, uplo, n, lda),
        "lauum_bufferSize",
        pairs["lauum_buffer_size"][is64],
        h.solver,
        uplo,
        n,
        a,
        lda,
    )
    work = h.buffer("lauum", max(int(lwork), 1) * (8 if is64 else 4))
    try:
        pairs["lauum"][is64](h.solver, uplo, n, a, lda, work, lwork, h.info())
    except h.libs.solver_error as err:
        raise _solver_failed("lauum", err) from err
