"""What ``stflow.linalg`` adds on the host over the binding call it makes.

    python benchmarks/linalg_overhead.py [--n 64] [--count 20000] [--json out.json]
    python benchmarks/linalg_overhead.py --fake      # no GPU: no-op bindings

For ``gemm``, ``syrk``, ``trsm`` and ``potrf``, in microseconds per call, side by side:
the raw nvmath-python binding called in a plain Python loop with its arguments ready
(the same handle, stream and workspace), and the ``stflow.linalg`` call on CuPy arrays
with ``stream=`` given and without it (CuPy's current stream). The device is
synchronised at the end of each loop, so keep ``n`` small: the figure is then the host
cost of a call.

``--fake`` replaces ``nvmath.bindings``, ``cuda.bindings.runtime`` and CuPy with
stand-ins whose functions do nothing (the arrays are objects with CuPy's attributes and
a ``__cuda_array_interface__``), which measures the pure-Python cost of
``stflow.linalg`` on a machine without a GPU; the raw column is then the cost of
calling a no-op function.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np

# -- stand-ins for --fake ---------------------------------------------------------


class _FakeMemory:
    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


class _FakeArray:
    """A C-order device array with CuPy's attributes; the interface dict is built
    at each read, as CuPy does."""

    _addresses = itertools.count(0x7000_0000, 0x100_0000)

    def __init__(self, shape: tuple[int, ...], dtype: Any = np.float64) -> None:
        self.shape = shape
        self.dtype = np.dtype(dtype)
        strides, step = [], self.dtype.itemsize
        for extent in reversed(shape):
            strides.insert(0, step)
            step *= extent
        self.strides = tuple(strides)
        self.data = _FakeMemory(next(self._addresses))

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "strides": None,
            "data": (self.data.ptr, False),
            "version": 3,
            "stream": 1,
        }


def _noop(*args: Any) -> None:
    return None


def _install_fakes() -> None:
    handles = itertools.count(0x100)
    memory = itertools.count(0x9000_0000, 0x100_0000)
    cublas = types.ModuleType("nvmath.bindings.cublas")
    cublas.cuBLASError = type("cuBLASError", (Exception,), {})
    cublas.create = lambda: next(handles)
    solver = types.ModuleType("nvmath.bindings.cusolverDn")
    solver.create = lambda: next(handles)
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
        setattr(cublas, name, _noop)
    for name in ("set_stream", "dpotrf", "spotrf", "xtrtri", "dlauum", "slauum"):
        setattr(solver, name, _noop)
    for name in (
        "dpotrf_buffer_size",
        "spotrf_buffer_size",
        "dlauum_buffer_size",
        "slauum_buffer_size",
    ):
        setattr(solver, name, lambda *args: 1024)
    solver.xtrtri_buffer_size = lambda *args: (1024, 0)
    status = types.ModuleType("nvmath.bindings.cusolver")
    status.cuSOLVERError = type("cuSOLVERError", (Exception,), {})
    runtime = types.ModuleType("cuda.bindings.runtime")
    runtime.cudaGetDevice = lambda: (0, 0)
    runtime.cudaMalloc = lambda nbytes: (0, next(memory))
    stream = types.SimpleNamespace(ptr=0x5000)
    cupy = types.ModuleType("cupy")
    cupy.ndarray = _FakeArray
    cupy.cuda = types.SimpleNamespace(
        get_current_stream=lambda: stream, Stream=lambda **kw: stream
    )
    sys.modules.update(
        {
            "nvmath.bindings.cublas": cublas,
            "nvmath.bindings.cusolverDn": solver,
            "nvmath.bindings.cusolver": status,
            "cuda.bindings.runtime": runtime,
            "cupy": cupy,
        }
    )


# -- the measurement --------------------------------------------------------------


def _per_call(fn: Callable[[], Any], count: int, sync: Callable[[], Any]) -> float:
    for _ in range(10):
        fn()
    sync()
    start = time.perf_counter()
    for _ in range(count):
        fn()
    sync()
    return (time.perf_counter() - start) / count * 1e6


def _cases(
    cupy: Any, n: int, stream: int
) -> dict[str, tuple[Callable[[], Any], Callable[[], Any], Callable[[], Any]]]:
    """Per routine: (raw binding call, linalg with stream=, linalg without)."""
    from stflow import _linalg_cuda, linalg

    rng = np.random.default_rng(0)
    spd = rng.standard_normal((n, n))
    spd = spd @ spd.T + n * np.eye(n)
    a, b, c = (cupy.ndarray((n, n)) if _FAKE else cupy.asarray(spd) for _ in range(3))
    h = _linalg_cuda.handles(stream)  # the handles linalg uses on this stream
    cublas, cusolver = h.libs.cublas, h.libs.cusolver
    pa, pb, pc = (x.data.ptr for x in (a, b, c))
    scalars = np.array([-1.0, 1.0])
    _KEEP.append(scalars)  # read by the library through its address
    alpha = scalars.ctypes.data
    beta = alpha + 8
    lwork = int(cusolver.dpotrf_buffer_size(h.solver, 1, n, pa, n))
    work = h.buffer("bench", max(lwork, 1) * 8)
    info = h.buffer("bench-info", 4)
    # potrf in place on a factored matrix would fail on the device (and report it in
    # info, which nobody reads): the host cost is the same.
    return {
        "gemm": (
            lambda: cublas.dgemm(h.blas, 1, 0, n, n, n, alpha, pb, n, pa, n, beta, pc, n),
            lambda: linalg.gemm(
                a, b, c, alpha=-1.0, beta=1.0, trans_b=True, stream=stream
            ),
            lambda: linalg.gemm(a, b, c, alpha=-1.0, beta=1.0, trans_b=True),
        ),
        "syrk": (
            lambda: cublas.dsyrk(h.blas, 1, 1, n, n, alpha, pa, n, beta, pc, n),
            lambda: linalg.syrk(a, c, alpha=-1.0, beta=1.0, stream=stream),
            lambda: linalg.syrk(a, c, alpha=-1.0, beta=1.0),
        ),
        "trsm": (
            lambda: cublas.dtrsm(h.blas, 0, 1, 1, 0, n, n, alpha, pa, n, pb, n),
            lambda: linalg.trsm(a, b, side="right", trans=True, stream=stream),
            lambda: linalg.trsm(a, b, side="right", trans=True),
        ),
        "potrf": (
            lambda: cusolver.dpotrf(h.solver, 1, n, pa, n, work, lwork, info),
            lambda: linalg.potrf(a, stream=stream),
            lambda: linalg.potrf(a),
        ),
    }


_FAKE = False
_KEEP: list[Any] = []


def main() -> None:
    global _FAKE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument(
        "--fake",
        action="store_true",
        help="no-op bindings and arrays: the pure-Python cost",
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.fake:
        _FAKE = True
        _install_fakes()
    import cupy

    if args.fake:

        def sync() -> None:
            pass

        stream = cupy.cuda.get_current_stream()
    else:
        stream = cupy.cuda.Stream(non_blocking=True)
        sync = stream.synchronize
    rows: dict[str, dict[str, float]] = {}
    with stream if not args.fake else _Nothing():
        for name, (raw, given, current) in _cases(cupy, args.n, stream.ptr).items():
            rows[name] = {
                "raw binding": _per_call(raw, args.count, sync),
                "linalg, stream=": _per_call(given, args.count, sync),
                "linalg, current stream": _per_call(current, args.count, sync),
            }
    print(
        f"{'us per call':14s} {'raw binding':>12s} {'linalg, stream=':>16s} "
        f"{'linalg, current':>16s}"
    )
    for name, row in rows.items():
        print(
            f"{name:14s} {row['raw binding']:12.2f} {row['linalg, stream=']:16.2f} "
            f"{row['linalg, current stream']:16.2f}"
        )
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"fake": args.fake, "n": args.n, "rows": rows}, out, indent=2)


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


if __name__ == "__main__":
    main()
