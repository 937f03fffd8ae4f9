"""Conjugate gradient with its iteration in a device-side ``while_loop``.

    python examples/cg_while_loop.py [--n 512] [--tol 1e-10] [--max-iterations 2000]
                                     [--backend auto|cuda|emulated]

Every scalar (``alpha``, the residual norms, the iteration count) lives in device
memory, so the loop body is recorded once and the device runs it until
``(rr > tol²) & (it < max_iterations)`` fails: the host never waits inside the loop.
The solution is checked against ``numpy.linalg.solve``. The matrix is a bundle of
row blocks (``sctx.bundle``), one argument of the matrix-vector task, which launches
one kernel per block.

On CUDA the bodies launch small CuPy ``RawKernel`` kernels (no temporary allocations,
so they are safe to capture); on the emulated backend they are NumPy functions
enqueued with ``stflow.emulated.launch``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import stflow as stf

_CUDA_SOURCE = r"""
extern "C" {
__global__ void matvec(const double* A, const double* p, double* y, int rows, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows) { double s = 0.0; for (int j = 0; j < n; ++j) s += A[(size_t)i * n + j] * p[j]; y[i] = s; }
}
__device__ double block_dot(const double* a, const double* b, int n) {
    __shared__ double part[256];
    double s = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += a[i] * b[i];
    part[threadIdx.x] = s; __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) { if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w]; __syncthreads(); }
    return part[0];
}
__global__ void step_alpha(const double* p, const double* Ap, const double* rr, double* alpha, int n) {
    double pAp = block_dot(p, Ap, n);
    if (threadIdx.x == 0) alpha[0] = rr[0] / pAp;
}
__global__ void update_x(double* x, const double* p, const double* alpha, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += alpha[0] * p[i];
}
__global__ void update_r(double* r, const double* Ap, const double* alpha, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) r[i] -= alpha[0] * Ap[i];
}
__global__ void squared_norm(const double* r, double* rr_new, int n) {
    double s = block_dot(r, r, n); if (threadIdx.x == 0) rr_new[0] = s;
}
__global__ void update_p(double* p, const double* r, double* rr, const double* rr_new, long long* it, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    double beta = rr_new[0] / rr[0];
    if (i < n) p[i] = r[i] + beta * p[i];
}
__global__ void finish(double* rr, const double* rr_new, long long* it) { rr[0] = rr_new[0]; it[0] += 1; }
}
"""


def _numpy_kernels() -> dict[str, Callable[..., None]]:
    def matvec(A: Any, p: Any, y: Any) -> None:  # one row block of A
        y[:] = A @ p

    def step_alpha(p: Any, Ap: Any, rr: Any, alpha: Any) -> None:
        alpha[0] = rr[0] / np.dot(p, Ap)

    def update_x(x: Any, p: Any, alpha: Any) -> None:
        x += alpha[0] * p

    def update_r(r: Any, Ap: Any, alpha: Any) -> None:
        r -= alpha[0] * Ap

    def squared_norm(r: Any, rr_new: Any) -> None:
        rr_new[0] = np.dot(r, r)

    def update_p(p: Any, r: Any, rr: Any, rr_new: Any, it: Any) -> None:
        p[:] = r + (rr_new[0] / rr[0]) * p

    def finish(rr: Any, rr_new: Any, it: Any) -> None:
        rr[0] = rr_new[0]
        it[0] += 1

    return locals()


class Kernels:
    """Launch ``name(*arguments)`` on a task's stream, on either backend."""

    def __init__(self, backend: str, n: int) -> None:
        self.backend = backend
        self.n = n
        if backend == "cuda":
            import cupy

            module = cupy.RawModule(code=_CUDA_SOURCE)
            self.functions = {
                name: module.get_function(name)
                for name in (
                    "matvec",
                    "step_alpha",
                    "update_x",
                    "update_r",
                    "squared_norm",
                    "update_p",
                    "finish",
                )
            }
        else:
            self.functions = _numpy_kernels()

    def matvec(self, t: Any) -> None:
        """``Ap = A p`` block by block: ``t.get(0)`` is the bundle of row blocks."""
        blocks, p, y = t.get(0), t.get(1), t.get(2)
        if self.backend != "cuda":
            from stflow.emulated import launch

            def product(p: Any, y: Any, *arrays: Any) -> None:
                start = 0
                for block in arrays:
                    self.functions["matvec"](block, p, y[start : start + len(block)])
                    start += len(block)

            launch(t.stream_ptr(), product, p, y, *blocks)
            return
        from stflow.interop.cupy import as_cupy, cupy_stream

        p_array, y_array = as_cupy(p), as_cupy(y)
        with cupy_stream(t.stream_ptr()):
            start = 0
            for view in blocks:
                block = as_cupy(view)
                rows = block.shape[0]
                self.functions["matvec"](
                    ((rows + 255) // 256,),
                    (256,),
                    (
                        block,
                        p_array,
                        y_array[start : start + rows],
                        np.int32(rows),
                        np.int32(self.n),
                    ),
                )
                start += rows

    def __call__(self, t: Any, name: str, single_block: bool = False) -> None:
        views = t.views()
        if self.backend != "cuda":
            from stflow.emulated import launch

            launch(t.stream_ptr(), self.functions[name], *views)
            return
        from stflow.interop.cupy import as_cupy, cupy_stream

        arrays = [as_cupy(v) for v in views]
        grid = 1 if single_block else (self.n + 255) // 256
        extra = () if name == "finish" else (np.int32(self.n),)
        with cupy_stream(t.stream_ptr()):
            self.functions[name]((grid,), (256,), (*arrays, *extra))


def solve(
    A_host: np.ndarray, b_host: np.ndarray, tol: float, max_iterations: int, backend: str
) -> tuple[np.ndarray, int, float]:
    """``x`` with ``A x = b``, the iterations run, and the final residual norm."""
    n = b_host.size
    x_host = np.zeros(n)
    it_host = np.zeros(1, dtype=np.int64)
    rr_host = np.zeros(1)
    with stf.stackable_context(backend=backend) as sctx:
        kernels = Kernels(sctx.backend, n)
        bounds = np.linspace(0, n, min(4, n) + 1).astype(int)
        row_blocks = [
            sctx.logical_data(np.ascontiguousarray(A_host[lo:hi]), name=f"A[{lo}:{hi}]")
            for lo, hi in zip(bounds[:-1], bounds[1:])
        ]
        for block in row_blocks:
            block.set_read_only()
        A = sctx.bundle(
            **{
                f"rows{k}": stf.constant(block)  # one argument
                for k, block in enumerate(row_blocks)
            }
        )
        x = sctx.logical_data(x_host, name="x")
        it = sctx.logical_data(it_host, name="it")
        rr = sctx.logical_data(rr_host, name="rr")
        r = sctx.logical_data(b_host.copy(), name="r")  # x = 0: r = b
        p = sctx.logical_data(b_host.copy(), name="p")
        Ap = sctx.logical_data_empty((n,), name="Ap")
        alpha = sctx.logical_data_empty((1,), name="alpha")
        rr_new = sctx.logical_data_empty((1,), name="rr_new")
        with sctx.task(r.read(), rr.write()) as t:
            kernels(t, "squared_norm", single_block=True)
        with sctx.while_loop() as loop:
            with sctx.task(A.read(), p.read(), Ap.write()) as t:
                kernels.matvec(t)
            with sctx.task(p.read(), Ap.read(), rr.read(), alpha.write()) as t:
                kernels(t, "step_alpha", single_block=True)
            with sctx.task(x.rw(), p.read(), alpha.read()) as t:
                kernels(t, "update_x")
            with sctx.task(r.rw(), Ap.read(), alpha.read()) as t:
                kernels(t, "update_r")
            with sctx.task(r.read(), rr_new.write()) as t:
                kernels(t, "squared_norm", single_block=True)
            with sctx.task(p.rw(), r.read(), rr.read(), rr_new.read(), it.read()) as t:
                kernels(t, "update_p")
            with sctx.task(rr.rw(), rr_new.read(), it.rw()) as t:
                kernels(t, "finish", single_block=True)
            loop.continue_while((rr > tol * tol) & (it < max_iterations))
    return x_host, int(it_host[0]), float(np.sqrt(rr_host[0]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--tol", type=float, default=1e-10)
    parser.add_argument("--max-iterations", type=int, default=2000)
    parser.add_argument("--backend", default=None)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(7)
    M = rng.standard_normal((args.n, args.n))
    A = M @ M.T / args.n + np.eye(args.n)  # symmetric positive definite
    b = rng.standard_normal(args.n)
    start = time.perf_counter()
    x, iterations, residual = solve(A, b, args.tol, args.max_iterations, args.backend)
    elapsed = time.perf_counter() - start
    error = np.linalg.norm(x - np.linalg.solve(A, b)) / np.linalg.norm(b)
    ok = error < 1e-6 and iterations < args.max_iterations
    print(
        f"CG n={args.n}: {iterations} iterations in one while_loop, residual "
        f"{residual:.2e}, relative error vs numpy.linalg.solve {error:.2e}, "
        f"{elapsed:.2f} s -> {'PASS' if ok else 'FAIL'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
