"""B5: tiled Cholesky (fp64) with stflow against one cuSOLVER call, on one GPU.

    python benchmarks/b5_cholesky.py [--sizes 8192 16384 32768] [--tiles 512 1024 2048]
                                     [--graph] [--json out.json]

The matrix is made on the device (random symmetric, diagonally dominant); its tiles are
CuPy arrays registered as logical data on the device, so the factorisation moves no
bytes. The tasks are those of ``examples/cholesky.py`` (CuPy bodies on the task
streams). The time runs from the first submission to the end of ``finalize()``; the
reference is ``cupy.linalg.cholesky`` (cuSOLVER ``potrf``) of the whole matrix, timed
in the same process after a warm-up. TFLOP/s count n³/3 flops.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import time

import stflow as stf

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "cholesky.py"


def _example():
    spec = importlib.util.spec_from_file_location("cholesky_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _CuSolver:
    """cuSOLVER's ``potrf`` called through ctypes on CuPy's current stream.

    CuPy refuses cuSOLVER calls while a stream captures a graph (its wrapper checks
    before setting the stream), but ``cusolverDnDpotrf`` itself is capturable when its
    workspace is allocated beforehand: graph mode uses this one. A row-major lower
    factor is the column-major upper one (``CUBLAS_FILL_MODE_UPPER``); the other
    triangle keeps its values, and the tiled code never reads it."""

    def __init__(self, cupy, nb: int) -> None:
        import ctypes
        importlib.import_module("cupy_backends.cuda.libs.cusolver")  # loads the library
        path = next(line.split()[-1] for line in open("/proc/self/maps")
                    if "libcusolver.so" in line)
        self.lib = ctypes.CDLL(path)
        self.ctypes = ctypes
        self.handle = ctypes.c_void_p()
        self._check(self.lib.cusolverDnCreate(ctypes.byref(self.handle)), "create")
        lwork = ctypes.c_int()
        probe = cupy.zeros((nb, nb))
        self._check(self.lib.cusolverDnDpotrf_bufferSize(
            self.handle, 1, nb, ctypes.c_void_p(probe.data.ptr), nb,
            ctypes.byref(lwork)), "bufferSize")
        self.work = cupy.empty(max(lwork.value, 1), dtype=cupy.float64)
        self.info = cupy.zeros(1, dtype=cupy.int32)
        self.cupy = cupy

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status:
            raise RuntimeError(f"cuSOLVER {what} failed with status {status}")

    def potrf(self, a) -> None:
        ctypes = self.ctypes
        stream = self.cupy.cuda.get_current_stream().ptr
        self._check(self.lib.cusolverDnSetStream(self.handle, ctypes.c_void_p(stream)),
                    "setStream")
        n = a.shape[0]
        self._check(self.lib.cusolverDnDpotrf(
            self.handle, 1, n, ctypes.c_void_p(a.data.ptr), n,
            ctypes.c_void_p(self.work.data.ptr), self.work.size,
            ctypes.c_void_p(self.info.data.ptr)), "potrf")


def graph_ops(example, solver: _CuSolver):
    """The example's CuPy kernels with a capturable ``potrf``."""
    class Ops(example.CuPyOps):
        @staticmethod
        def potrf(a) -> None:
            solver.potrf(a)
    return Ops


def spd(cupy, n: int):
    r = cupy.random.RandomState(0).uniform(-1.0, 1.0, (n, n))
    a = r + r.T
    a[cupy.arange(n), cupy.arange(n)] += 2.0 * n
    return a


def cusolver_seconds(cupy, a, repeats: int = 3) -> tuple[float, object]:
    cupy.linalg.cholesky(a)
    cupy.cuda.Device().synchronize()
    best = float("inf")
    result = None
    for _ in range(repeats):
        start = time.perf_counter()
        result = cupy.linalg.cholesky(a)
        cupy.cuda.Device().synchronize()
        best = min(best, time.perf_counter() - start)
    return best, result


def stflow_seconds(cupy, example, a, nb: int, use_graph: bool,
                   ops=None) -> tuple[float, dict]:
    n = a.shape[0]
    count = n // nb
    parts = {(i, j): cupy.ascontiguousarray(a[i * nb:(i + 1) * nb, j * nb:(j + 1) * nb])
             for i in range(count) for j in range(i + 1)}
    cupy.cuda.Device().synchronize()
    ctx = stf.context(backend="cuda", use_graph=use_graph)
    tiles = {key: ctx.logical_data(part) for key, part in parts.items()}
    start = time.perf_counter()
    example.factorize(ctx, tiles, count, ops or example.CuPyOps)
    ctx.finalize()
    cupy.cuda.Device().synchronize()
    return time.perf_counter() - start, parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[8192, 16384, 32768])
    parser.add_argument("--tiles", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument("--graph", action="store_true", help="also in graph mode")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    import cupy
    example = _example()
    stflow_seconds(cupy, example, spd(cupy, 2048), 512, False)        # warm-up
    solvers: dict[int, _CuSolver] = {}

    def ops_for(nb: int, use_graph: bool):
        if not use_graph:
            return None
        if nb not in solvers:
            solvers[nb] = _CuSolver(cupy, nb)
        return graph_ops(example, solvers[nb])

    if args.graph:
        stflow_seconds(cupy, example, spd(cupy, 2048), 512, True, ops_for(512, True))
    rows = []
    print(f"{'n':>6} {'nb':>5} {'mode':>6} {'stflow s':>9} {'TFLOP/s':>8} "
          f"{'cuSOLVER s':>10} {'TFLOP/s':>8} {'ratio':>6} {'error':>8}")
    for n in args.sizes:
        a = spd(cupy, n)
        reference, expected = cusolver_seconds(cupy, a)
        flops = n ** 3 / 3
        for nb in args.tiles:
            if n % nb or n // nb < 2:
                continue
            for use_graph in ([False, True] if args.graph else [False]):
                seconds, parts = stflow_seconds(cupy, example, a, nb, use_graph,
                                                ops_for(nb, use_graph))
                count = n // nb
                error = 0.0
                for (i, j), part in parts.items():
                    if i in (0, count - 1) or j == i:
                        want = expected[i * nb:(i + 1) * nb, j * nb:(j + 1) * nb]
                        got = cupy.tril(part) if i == j else part
                        want = cupy.tril(want) if i == j else want
                        error = max(error, float(cupy.max(cupy.abs(got - want))
                                                 / cupy.max(cupy.abs(want))))
                del parts
                row = {"n": n, "nb": nb, "mode": "graph" if use_graph else "stream",
                       "stflow_s": seconds, "stflow_tflops": flops / seconds / 1e12,
                       "cusolver_s": reference,
                       "cusolver_tflops": flops / reference / 1e12,
                       "ratio": reference / seconds, "max_rel_error": error}
                rows.append(row)
                print(f"{n:>6} {nb:>5} {row['mode']:>6} {seconds:>9.3f} "
                      f"{row['stflow_tflops']:>8.1f} {reference:>10.3f} "
                      f"{row['cusolver_tflops']:>8.1f} {row['ratio']:>6.2f} "
                      f"{error:>8.1e}", flush=True)
                cupy.get_default_memory_pool().free_all_blocks()
        del a, expected
        cupy.get_default_memory_pool().free_all_blocks()
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=2)


if __name__ == "__main__":
    main()
