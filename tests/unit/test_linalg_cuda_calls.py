"""The CUDA path of stflow.linalg without a GPU: fake ``nvmath.bindings`` and
``cuda.bindings.runtime`` modules record every library call, and the tests check the
sequence — one pair of handles per (thread, stream), bound to its stream with
its own workspace, buffers allocated once per size — and the arguments of each call,
where the row-major operands become the libraries' column-major ones."""

from __future__ import annotations

import ctypes
import itertools
import sys
import threading
import types

import numpy as np
import pytest

from stflow import _linalg_cuda, linalg
from stflow.errors import BackendUnavailableError

MIB = 1 << 20
F64, F32 = np.dtype(np.float64), np.dtype(np.float32)
OP_N, OP_T = 0, 1
LOWER, UPPER = 0, 1
LEFT, RIGHT = 0, 1
NON_UNIT, UNIT = 0, 1


class Fake:
    """The fake libraries' shared record: every call as (name, args)."""

    def __init__(self):
        self.calls = []
        self.device = 0
        self.addresses = itertools.count(0x7F00_0000_0000, 0x1000_0000)
        self.handles = itertools.count(0x100)
        self.fail = {}  # name -> exception class to raise

    def names(self):
        return [name for name, _ in self.calls]

    def last(self, name):
        return [args for called, args in self.calls if called == name][-1]

    def function(self, name, result=None):
        def call(*args):
            self.calls.append((name, args))
            if name in self.fail:
                raise self.fail[name](7)
            return result(*args) if callable(result) else result

        return call


class CublasError(Exception):
    pass


class CusolverError(Exception):
    pass


def _modules(fake):
    cublas = types.ModuleType("nvmath.bindings.cublas")
    cublas.cuBLASError = CublasError
    cublas.create = fake.function("cublas.create", lambda: next(fake.handles))
    for name in (
        "set_stream",
        "set_workspace",
        "set_pointer_mode",
        "dgemm",
        "sgemm",
        "dgemm_strided_batched",
        "sgemm_strided_batched",
        "dgemv",
        "sgemv",
        "dsyrk",
        "ssyrk",
        "dtrsm",
        "strsm",
        "dtrmm",
        "strmm",
        "ddot",
        "sdot",
        "dcopy",
        "scopy",
    ):
        setattr(cublas, name, fake.function(f"cublas.{name}"))
    solver = types.ModuleType("nvmath.bindings.cusolverDn")
    solver.create = fake.function("cusolver.create", lambda: next(fake.handles))
    solver.set_stream = fake.function("cusolver.set_stream")
    solver.dpotrf_buffer_size = fake.function(
        "cusolver.dpotrf_buffer_size", lambda h, uplo, n, a, lda: 10 * n
    )
    solver.spotrf_buffer_size = fake.function(
        "cusolver.spotrf_buffer_size", lambda h, uplo, n, a, lda: 10 * n
    )
    solver.xtrtri_buffer_size = fake.function(
        "cusolver.xtrtri_buffer_size", lambda *args: (64 * args[3], 0)
    )
    solver.dlauum_buffer_size = fake.function(
        "cusolver.dlauum_buffer_size", lambda h, uplo, n, a, lda: 3 * n
    )
    solver.slauum_buffer_size = solver.dlauum_buffer_size
    for name in ("dpotrf", "spotrf", "xtrtri", "dlauum", "slauum"):
        setattr(solver, name, fake.function(f"cusolver.{name}"))
    status = types.ModuleType("nvmath.bindings.cusolver")
    status.cuSOLVERError = CusolverError
    runtime = types.ModuleType("cuda.bindings.runtime")
    runtime.cudaGetDevice = fake.function("cudaGetDevice", lambda: (0, fake.device))
    runtime.cudaMalloc = fake.function(
        "cudaMalloc", lambda nbytes: (0, next(fake.addresses))
    )
    return {
        "nvmath.bindings.cublas": cublas,
        "nvmath.bindings.cusolverDn": solver,
        "nvmath.bindings.cusolver": status,
        "cuda.bindings.runtime": runtime,
    }


@pytest.fixture
def fake(monkeypatch):
    """Fresh fake libraries in ``sys.modules`` and no handles cached."""
    recorder = Fake()
    for name, module in _modules(recorder).items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(_linalg_cuda, "_LIBRARIES", None)
    monkeypatch.setattr(_linalg_cuda, "_HANDLES", {})
    return recorder


_pointers = itertools.count(0x10_0000, 0x10_0000)


class DeviceArray:
    """Just a ``__cuda_array_interface__`` (row-major; ``pitch`` in elements)."""

    def __init__(self, shape, dtype=F64, pitch=None, batch_stride=None):
        dtype = np.dtype(dtype)
        strides = None
        if pitch is not None or batch_stride is not None:
            rows, cols = shape[-2:]
            row = (pitch or cols) * dtype.itemsize
            strides = (row, dtype.itemsize)
            if len(shape) == 3:
                step = (
                    rows * row if batch_stride is None else batch_stride * dtype.itemsize
                )
                strides = (step, *strides)
        self.ptr = next(_pointers)
        self.shape = shape
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": dtype.str,
            "strides": strides,
            "data": (self.ptr, False),
            "version": 3,
        }


def _scalar(pointer, dtype=F64):
    kind = ctypes.c_double if dtype == F64 else ctypes.c_float
    return kind.from_address(pointer).value


# -- handles ----------------------------------------------------------------------

HANDLE_SETUP = [
    "cublas.create",
    "cublas.set_stream",
    "cudaMalloc",
    "cublas.set_workspace",
    "cusolver.create",
    "cusolver.set_stream",
]


def _library_calls(fake):
    return [name for name in fake.names() if name != "cudaGetDevice"]


def test_one_pair_of_handles_per_stream(fake):
    a, b, c = DeviceArray((2, 3)), DeviceArray((3, 4)), DeviceArray((2, 4))
    linalg.gemm(a, b, c, stream=11)
    assert fake.names() == HANDLE_SETUP + ["cublas.dgemm"]
    # Bound to its stream first; then the workspace (cublasSetStream resets it).
    blas_handle = fake.calls[1][1][0]
    assert fake.calls[1] == ("cublas.set_stream", (blas_handle, 11))
    assert fake.calls[2] == ("cudaMalloc", (8 * MIB,))
    workspace = fake.calls[3][1]
    assert workspace[0] == blas_handle and workspace[2] == 8 * MIB
    solver_handle = fake.calls[5][1][0]
    assert fake.calls[5] == ("cusolver.set_stream", (solver_handle, 11))
    assert fake.last("cublas.dgemm")[0] == blas_handle

    fake.calls.clear()
    linalg.gemm(a, b, c, stream=11)  # the same handles
    assert fake.names() == ["cublas.dgemm"]
    assert fake.last("cublas.dgemm")[0] == blas_handle

    fake.calls.clear()
    linalg.gemm(a, b, c, stream=12)  # another stream
    assert fake.names() == HANDLE_SETUP + ["cublas.dgemm"]
    assert fake.calls[1][1][1] == 12
    other = fake.last("cublas.dgemm")[0]
    assert other != blas_handle

    # A stream belongs to one device: its handles are found without asking which
    # device is current.
    fake.calls.clear()
    fake.device = 1
    linalg.gemm(a, b, c, stream=11)
    assert fake.names() == ["cublas.dgemm"]
    assert fake.last("cublas.dgemm")[0] == blas_handle


@pytest.mark.parametrize("stream", [0, 1, 2])
def test_the_streams_of_every_device_have_handles_per_device(fake, stream):
    """0, cudaStreamLegacy and cudaStreamPerThread name a stream of each device."""
    a, b, c = DeviceArray((2, 3)), DeviceArray((3, 4)), DeviceArray((2, 4))
    linalg.gemm(a, b, c, stream=stream)
    first = fake.last("cublas.dgemm")[0]
    fake.calls.clear()
    fake.device = 1  # another device
    linalg.gemm(a, b, c, stream=stream)
    assert _library_calls(fake) == HANDLE_SETUP + ["cublas.dgemm"]
    assert fake.last("cublas.dgemm")[0] != first
    fake.calls.clear()
    fake.device = 0
    linalg.gemm(a, b, c, stream=stream)
    assert fake.names() == ["cudaGetDevice", "cublas.dgemm"]
    assert fake.last("cublas.dgemm")[0] == first


def test_another_thread_has_handles_of_its_own(fake):
    a, b, c = DeviceArray((2, 2)), DeviceArray((2, 2)), DeviceArray((2, 2))
    linalg.gemm(a, b, c, stream=5)
    mine = fake.last("cublas.dgemm")[0]
    fake.calls.clear()
    thread = threading.Thread(target=linalg.gemm, args=(a, b, c), kwargs={"stream": 5})
    thread.start()
    thread.join()
    assert _library_calls(fake) == HANDLE_SETUP + ["cublas.dgemm"]
    assert fake.last("cublas.dgemm")[0] != mine


def test_the_stream_argument_forms(fake, monkeypatch):
    a, b, c = DeviceArray((2, 2)), DeviceArray((2, 2)), DeviceArray((2, 2))

    class WithPtr:
        ptr = 21

    class WithProtocol:
        def __cuda_stream__(self):
            return (0, 22)

    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(
        get_current_stream=lambda: types.SimpleNamespace(ptr=23)
    )
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    for stream, handle in ((WithPtr(), 21), (WithProtocol(), 22), (None, 23)):
        fake.calls.clear()
        linalg.gemm(a, b, c, stream=stream)
        assert fake.last("cublas.set_stream")[1] == handle
        assert fake.last("cusolver.set_stream")[1] == handle
    with pytest.raises(TypeError, match="stream must be"):
        linalg.gemm(a, b, c, stream="default")


# -- argument order: row-major operands, column-major calls ---------------------


@pytest.mark.parametrize(
    "trans_a,trans_b", [(False, False), (True, False), (False, True), (True, True)]
)
@pytest.mark.parametrize("dtype", [F64, F32])
def test_gemm_swaps_the_operands(fake, dtype, trans_a, trans_b):
    m, n, k = 2, 3, 4
    a = DeviceArray((k, m) if trans_a else (m, k), dtype, pitch=9)
    b = DeviceArray((n, k) if trans_b else (k, n), dtype)
    c = DeviceArray((m, n), dtype, pitch=7)
    linalg.gemm(a, b, c, alpha=2.5, beta=-1.5, trans_a=trans_a, trans_b=trans_b, stream=1)
    name = "cublas.dgemm" if dtype == F64 else "cublas.sgemm"
    h, op_1, op_2, m_, n_, k_, alpha, p1, ld1, p2, ld2, beta, pc, ldc = fake.last(name)
    # Cᵀ = op(B)ᵀ op(A)ᵀ: b first, n × m, each operand keeping its transpose flag.
    assert (op_1, op_2) == (OP_T if trans_b else OP_N, OP_T if trans_a else OP_N)
    assert (m_, n_, k_) == (n, m, k)
    assert (p1, ld1) == (b.ptr, k if trans_b else n)
    assert (p2, ld2) == (a.ptr, 9)
    assert (pc, ldc) == (c.ptr, 7)
    assert _scalar(alpha, dtype) == 2.5 and _scalar(beta, dtype) == -1.5


def test_gemm_batched_is_one_strided_call(fake):
    count, m, n, k = 5, 2, 3, 4
    a = DeviceArray((count, m, k))
    b = DeviceArray((k, n))  # one matrix for all
    c = DeviceArray((count, m, n), pitch=8, batch_stride=40)
    linalg.gemm_batched(a, b, c, alpha=3.0, beta=1.0, trans_b=False, stream=1)
    (
        h,
        op_1,
        op_2,
        m_,
        n_,
        k_,
        alpha,
        pb,
        ldb,
        stride_b,
        pa,
        lda,
        stride_a,
        beta,
        pc,
        ldc,
        stride_c,
        count_,
    ) = fake.last("cublas.dgemm_strided_batched")
    assert (op_1, op_2, m_, n_, k_) == (OP_N, OP_N, n, m, k)
    assert (pb, ldb, stride_b) == (b.ptr, n, 0)
    assert (pa, lda, stride_a) == (a.ptr, k, m * k)
    assert (pc, ldc, stride_c, count_) == (c.ptr, 8, 40, count)
    assert _scalar(alpha) == 3.0 and _scalar(beta) == 1.0

    a_t = DeviceArray((count, k, m), F32)
    b_t = DeviceArray((count, n, k), F32)
    c32 = DeviceArray((count, m, n), F32)
    linalg.gemm_batched(a_t, b_t, c32, trans_a=True, trans_b=True, stream=1)
    args = fake.last("cublas.sgemm_strided_batched")
    assert args[1:6] == (OP_T, OP_T, n, m, k)
    assert args[7:10] == (b_t.ptr, k, n * k) and args[10:13] == (a_t.ptr, m, k * m)


def test_gemv_and_syrk_read_the_transpose(fake):
    a, x, y = DeviceArray((3, 5), pitch=6), DeviceArray((5,)), DeviceArray((3,))
    linalg.gemv(a, x, y, alpha=0.5, beta=2.0, stream=1)
    args = fake.last("cublas.dgemv")
    # The library reads aᵀ (5 × 3): a @ x is its transposed product.
    assert args[1:4] == (OP_T, 5, 3) and args[5:7] == (a.ptr, 6)
    assert args[7:9] == (x.ptr, 1) and args[10:12] == (y.ptr, 1)
    linalg.gemv(a, y, x, trans=True, stream=1)
    assert fake.last("cublas.dgemv")[1:4] == (OP_N, 5, 3)

    a, c = DeviceArray((4, 2)), DeviceArray((4, 4))
    for trans, op in ((False, OP_T), (True, OP_N)):
        operand = DeviceArray((2, 4)) if trans else a
        linalg.syrk(operand, c, alpha=-1.0, beta=1.0, trans=trans, stream=1)
        h, uplo, op_, n, k, alpha, pa, lda, beta, pc, ldc = fake.last("cublas.dsyrk")
        # Row-major lower is column-major upper.
        assert (uplo, op_, n, k) == (UPPER, op, 4, 2)
        assert (pa, lda, pc, ldc) == (operand.ptr, 2 if not trans else 4, c.ptr, 4)
        assert _scalar(alpha) == -1.0 and _scalar(beta) == 1.0


@pytest.mark.parametrize("name", ["trsm", "trmm"])
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("trans", [False, True])
def test_triangular_calls_flip_side_and_triangle(fake, name, side, lower, trans):
    m, n = 3, 5
    a = DeviceArray((m, m) if side == "left" else (n, n), pitch=8)
    b = DeviceArray((m, n), pitch=6)
    getattr(linalg, name)(
        a,
        b,
        side=side,
        lower=lower,
        trans=trans,
        unit_diagonal=trans,
        alpha=-2.0,
        stream=1,
    )
    args = fake.last(f"cublas.d{name}")
    h, side_, uplo, op, diag, m_, n_, alpha, pa, lda, pb, ldb = args[:12]
    assert side_ == (RIGHT if side == "left" else LEFT)
    assert uplo == (UPPER if lower else LOWER)
    assert op == (OP_T if trans else OP_N) and diag == (UNIT if trans else NON_UNIT)
    assert (m_, n_) == (n, m)
    assert (pa, lda, pb, ldb) == (a.ptr, 8, b.ptr, 6)
    assert _scalar(alpha) == -2.0
    if name == "trmm":  # cuBLAS's output: b itself
        assert args[12:] == (b.ptr, 6)
    else:
        assert len(args) == 12


def test_dot_switches_to_device_pointers_for_one_call(fake):
    x, y, out = DeviceArray((7,)), DeviceArray((7,)), DeviceArray((1,))
    linalg.dot(x, y, out, stream=1)
    assert fake.names()[-3:] == [
        "cublas.set_pointer_mode",
        "cublas.ddot",
        "cublas.set_pointer_mode",
    ]
    modes = [args[1] for name, args in fake.calls if name == "cublas.set_pointer_mode"]
    assert modes == [1, 0]
    assert fake.last("cublas.ddot")[1:] == (7, x.ptr, 1, y.ptr, 1, out.ptr)
    fake.fail["cublas.ddot"] = CublasError
    with pytest.raises(RuntimeError, match="dot failed"):
        linalg.dot(x, y, out, stream=1)
    assert fake.names()[-1] == "cublas.set_pointer_mode"  # back to host mode
    assert fake.last("cublas.set_pointer_mode")[1] == 0


# -- cuSOLVER: workspaces, once per size ----------------------------------------


def test_potrf_workspace_is_allocated_once_per_size(fake):
    a = DeviceArray((8, 8), pitch=10)
    linalg.potrf(a, stream=1)
    work, info = [args for name, args in fake.calls if name == "cudaMalloc"][1:]
    assert work == (1024,) and info == (256,)  # 80 doubles, rounded up
    h, uplo, n, pa, lda, workspace, lwork, info_ptr = fake.last("cusolver.dpotrf")
    assert (uplo, n, pa, lda, lwork) == (UPPER, 8, a.ptr, 10, 80)

    fake.calls.clear()
    for _ in range(3):  # as in a graph capture
        linalg.potrf(a, stream=1)
        linalg.potrf(DeviceArray((4, 4)), stream=1)  # smaller: the same buffer
    assert "cudaMalloc" not in fake.names()
    assert fake.names().count("cusolver.dpotrf_buffer_size") == 1  # asked once
    assert {args[5] for name, args in fake.calls if name == "cusolver.dpotrf"} == {
        workspace
    }

    given = DeviceArray((1,), np.int32)
    big = DeviceArray((30, 30))
    linalg.potrf(big, info=given, stream=1)
    assert fake.last("cudaMalloc") == (4096,)  # grown: a new buffer
    args = fake.last("cusolver.dpotrf")
    assert args[5] != workspace and args[7] == given.ptr
    linalg.potrf(a, stream=1)  # the bigger one from now on
    assert fake.last("cusolver.dpotrf")[5] == args[5]
    assert fake.last("cusolver.dpotrf")[7] == info_ptr


@pytest.mark.parametrize("dtype,kind", [(F64, 1), (F32, 0)])
@pytest.mark.parametrize("lower", [True, False])
def test_trtri_and_lauum_flip_the_triangle(fake, dtype, kind, lower):
    a = DeviceArray((6, 6), dtype, pitch=7)
    info = DeviceArray((1,), np.int32)
    linalg.trtri(a, lower=lower, unit_diagonal=True, info=info, stream=1)
    size_args = fake.last("cusolver.xtrtri_buffer_size")
    assert size_args[1:] == (UPPER if lower else LOWER, UNIT, 6, kind, a.ptr, 7)
    (h, uplo, diag, n, kind_, pa, lda, work, work_bytes, host, host_bytes, info_ptr) = (
        fake.last("cusolver.xtrtri")
    )
    assert (uplo, diag, n, kind_, pa, lda) == size_args[1:]
    assert work_bytes == 64 * 6 and (host, host_bytes) == (0, 0)
    assert info_ptr == info.ptr

    linalg.lauum(a, lower=lower, stream=1)
    name = "cusolver.dlauum" if dtype == F64 else "cusolver.slauum"
    h, uplo, n, pa, lda, work, lwork, info_ptr = fake.last(name)
    assert (uplo, n, pa, lda, lwork) == (UPPER if lower else LOWER, 6, a.ptr, 7, 18)


def test_trtri_with_a_unit_diagonal_keeps_the_diagonal(fake):
    """cuSOLVER writes ones on a unit diagonal: it is copied aside before the call and
    back after it, on the cuBLAS handle of the same stream (strided copies: every
    (pitch + 1)-th element), into a buffer of the handle made once."""
    for dtype, copy in ((F64, "cublas.dcopy"), (F32, "cublas.scopy")):
        a = DeviceArray((6, 6), dtype, pitch=9)
        linalg.trtri(a, unit_diagonal=True, stream=7)
        names = fake.names()
        at = names.index("cusolver.xtrtri")
        assert names[at - 1] == copy and names[at + 1] == copy
        blas = fake.calls[at - 1][1][0]
        save, restore = fake.calls[at - 1][1], fake.calls[at + 1][1]
        saved = save[4]
        assert save == (blas, 6, a.ptr, 10, saved, 1)
        assert restore == (blas, 6, saved, 1, a.ptr, 10)
        if dtype == F64:  # the handles made now
            assert blas == fake.last("cublas.set_stream")[0]
        fake.calls.clear()
        linalg.trtri(a, unit_diagonal=True, stream=7)  # as in a capture
        assert "cudaMalloc" not in fake.names()
        assert fake.calls[0] == (copy, save) and fake.calls[-1] == (copy, restore)
        fake.calls.clear()
    linalg.trtri(DeviceArray((6, 6)), unit_diagonal=False, stream=7)
    assert fake.names() == ["cusolver.xtrtri_buffer_size", "cusolver.xtrtri"]


class FakeCupyArray:
    """CuPy's attributes (``data.ptr``, ``shape``, ``strides``, ``dtype``) and an
    interface dictionary built at each read (as CuPy's), whose reads are counted."""

    reads = 0

    def __init__(self, shape, dtype=F64, pitch=None):
        self.dtype = np.dtype(dtype)
        size = self.dtype.itemsize
        if len(shape) == 1:
            self.strides = (size,)
        else:
            self.strides = ((pitch or shape[-1]) * size, size)
        self.shape = shape
        self.data = types.SimpleNamespace(ptr=next(_pointers))

    @property
    def __cuda_array_interface__(self):
        FakeCupyArray.reads += 1
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "strides": self.strides,
            "data": (self.data.ptr, False),
            "version": 3,
        }


class InterfaceOnly:
    """The same array as a :class:`FakeCupyArray`, seen through its interface only."""

    def __init__(self, array):
        self.__cuda_array_interface__ = array.__cuda_array_interface__


def _every_routine(make, stream):
    """Every routine once on arrays from ``make(shape, pitch)``."""
    a, b, c = make((4, 4), 6), make((4, 4), None), make((4, 4), 5)
    x, y, out = make((4,), None), make((4,), None), make((1,), None)
    linalg.gemm(a, b, c, alpha=2.0, beta=0.5, trans_b=True, stream=stream)
    linalg.gemv(a, x, y, alpha=3.0, stream=stream)
    linalg.syrk(a, c, alpha=-1.0, beta=1.0, stream=stream)
    linalg.trsm(a, b, side="right", trans=True, alpha=0.25, stream=stream)
    linalg.trmm(a, b, lower=False, unit_diagonal=True, stream=stream)
    linalg.dot(x, y, out, stream=stream)
    linalg.potrf(a, stream=stream)
    linalg.trtri(a, unit_diagonal=True, stream=stream)
    linalg.lauum(a, lower=False, stream=stream)


def test_cupy_arrays_and_interface_arrays_make_the_same_calls(fake, monkeypatch):
    """The fast reading of CuPy's attributes gives the calls that the general
    reading of the CUDA Array Interface gives, and, once CuPy's type is known,
    builds no interface dictionary."""
    cupy = types.ModuleType("cupy")
    cupy.ndarray = FakeCupyArray
    cupy.cuda = types.SimpleNamespace(
        get_current_stream=lambda: types.SimpleNamespace(ptr=31)
    )
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    made = []

    def cupy_array(shape, pitch):
        made.append(FakeCupyArray(shape, pitch=pitch))
        return made[-1]

    _every_routine(cupy_array, 3)  # handles, buffers, sizes
    _every_routine(cupy_array, None)  # CuPy's current stream
    fake.calls.clear()
    made.clear()
    reads = FakeCupyArray.reads
    _every_routine(cupy_array, 3)
    fast = list(fake.calls)
    assert FakeCupyArray.reads == reads  # no interface dictionary
    fake.calls.clear()
    views = iter([InterfaceOnly(array) for array in made])
    _every_routine(lambda shape, pitch: next(views), 3)
    assert fake.calls == fast
    assert [name for name, _ in fast].count("cublas.dcopy") == 2
    fake.calls.clear()
    made.clear()
    _every_routine(cupy_array, None)
    assert fake.calls[0][1][0] != fast[0][1][0]  # stream 31's handles
    assert [name for name, _ in fake.calls] == [name for name, _ in fast]


def test_numpy_flags_and_stream_objects_take_the_general_checks(fake):
    a, b, c = DeviceArray((2, 2)), DeviceArray((2, 2)), DeviceArray((2, 2))

    class WithPtr:
        ptr = 3

    linalg.gemm(a, b, c, trans_a=np.True_, stream=3)
    first = fake.last("cublas.dgemm")
    linalg.gemm(a, b, c, trans_a=True, stream=WithPtr())
    assert fake.last("cublas.dgemm") == first
    linalg.trsm(a, b, lower=np.False_, stream=WithPtr())
    assert fake.last("cublas.dtrsm")[2] == LOWER
    with pytest.raises(TypeError, match="trans must be True or False"):
        linalg.syrk(a, c, trans=1, stream=3)


def test_every_call_after_the_first_allocates_nothing(fake):
    """What a graph capture needs: once each routine ran at a size, calling it again
    (and so capturing it) allocates nothing."""
    a, b, c = DeviceArray((4, 4)), DeviceArray((4, 4)), DeviceArray((4, 4))
    x, out = DeviceArray((4,)), DeviceArray((1,))

    def every():
        linalg.gemm(a, b, c, stream=3)
        linalg.gemm_batched(DeviceArray((3, 4, 4)), b, DeviceArray((3, 4, 4)), stream=3)
        linalg.gemv(a, x, x, stream=3)
        linalg.syrk(a, c, stream=3)
        linalg.trsm(a, b, stream=3)
        linalg.trmm(a, b, stream=3)
        linalg.dot(x, x, out, stream=3)
        linalg.potrf(a, stream=3)
        linalg.trtri(a, stream=3)
        linalg.lauum(a, stream=3)

    every()
    fake.calls.clear()
    every()
    assert "cudaMalloc" not in fake.names()
    assert not [name for name in fake.names() if name.endswith("create")]


# -- failures ---------------------------------------------------------------------


def test_library_failures_are_runtime_errors(fake):
    a = DeviceArray((2, 2))
    fake.fail["cublas.dgemm"] = CublasError
    with pytest.raises(RuntimeError, match="gemm failed: cuBLAS") as raised:
        linalg.gemm(a, a, a, stream=1)
    assert isinstance(raised.value.__cause__, CublasError)
    fake.fail["cusolver.dpotrf"] = CusolverError
    with pytest.raises(RuntimeError, match="potrf failed: cuSOLVER"):
        linalg.potrf(a, stream=1)


def test_a_library_that_does_not_load_names_how_to_get_it(fake):
    fake.fail["cublas.create"] = OSError
    with pytest.raises(BackendUnavailableError, match="could not load cuBLAS"):
        linalg.gemm(
            DeviceArray((2, 2)), DeviceArray((2, 2)), DeviceArray((2, 2)), stream=1
        )


def test_without_nvmath_the_error_names_the_extra(fake, monkeypatch):
    monkeypatch.setitem(sys.modules, "nvmath.bindings.cublas", None)
    with pytest.raises(
        BackendUnavailableError, match=r"nvmath-python.*pip install 'stflow\[linalg\]'"
    ):
        linalg.trtri(DeviceArray((3, 3)), stream=1)
    assert isinstance(BackendUnavailableError("x"), ImportError)
    # NumPy arrays never need it.
    a = np.eye(3) * 2
    linalg.trtri(a)
    np.testing.assert_array_equal(a, np.eye(3) / 2)


def test_checks_come_before_any_library_call(fake):
    with pytest.raises(ValueError, match="does not fit"):
        linalg.gemm(DeviceArray((2, 3)), DeviceArray((2, 3)), DeviceArray((2, 3)))
    with pytest.raises(ValueError, match="must not overlap"):
        linalg.gemm_batched(
            DeviceArray((3, 2, 2)),
            DeviceArray((2, 2)),
            DeviceArray((3, 2, 2), batch_stride=0),
        )
    with pytest.raises(ValueError, match="non-negative multiple"):
        linalg.gemm_batched(
            DeviceArray((3, 2, 2), batch_stride=-4),
            DeviceArray((2, 2)),
            DeviceArray((3, 2, 2)),
        )
    with pytest.raises(TypeError, match="share a dtype"):
        linalg.trsm(DeviceArray((2, 2)), DeviceArray((2, 2), F32))
    with pytest.raises(TypeError, match="float32 and float64"):
        linalg.lauum(DeviceArray((2, 2), np.int32))
    with pytest.raises(ValueError, match="square"):
        linalg.trtri(DeviceArray((2, 3)))
    with pytest.raises(TypeError, match="lower must be True or False"):
        linalg.trtri(DeviceArray((2, 2)), lower="L")
    assert fake.calls == []


def test_empty_operands_call_nothing(fake):
    linalg.gemm(DeviceArray((0, 3)), DeviceArray((3, 4)), DeviceArray((0, 4)), stream=1)
    linalg.gemm_batched(
        DeviceArray((0, 2, 2)), DeviceArray((2, 2)), DeviceArray((0, 2, 2)), stream=1
    )
    linalg.trsm(DeviceArray((3, 3)), DeviceArray((3, 0)), stream=1)
    linalg.potrf(DeviceArray((0, 0)), stream=1)
    linalg.trtri(DeviceArray((0, 0)), stream=1)
    linalg.lauum(DeviceArray((0, 0)), stream=1)
    assert fake.calls == []


def test_without_cupy_the_stream_must_be_given(fake, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    a = DeviceArray((2, 2))
    with pytest.raises(BackendUnavailableError, match="pass stream="):
        linalg.lauum(a)
    linalg.lauum(a, stream=4)  # no CuPy needed
    assert fake.last("cusolver.set_stream")[1] == 4


def test_routines_without_info_share_the_handle_word(fake):
    a = DeviceArray((3, 3))
    linalg.potrf(a, stream=1)
    linalg.trtri(a, stream=1)
    linalg.lauum(a, stream=1)
    words = {
        fake.last("cusolver.dpotrf")[-1],
        fake.last("cusolver.xtrtri")[-1],
        fake.last("cusolver.dlauum")[-1],
    }
    assert len(words) == 1 and 0 not in words


def test_importing_linalg_loads_no_cuda_module():
    import subprocess

    code = (
        "import sys, numpy as np, stflow.linalg as l; a = np.eye(2); "
        "l.trtri(a); l.gemm(a, a, a); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('nvmath', 'cupy', 'cuda')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
