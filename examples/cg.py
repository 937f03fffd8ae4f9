"""Conjugate gradient in stream mode, the host checking the residual every few iterations.

    python examples/cg.py [--n 512] [--tol 1e-10] [--max-iterations 2000]
                          [--check-every 10] [--graph] [--backend auto|cuda|emulated]

Solves ``A x = b`` for a symmetric positive definite ``A`` with the textbook
iteration, starting from ``x = 0``::

    Ap = A p;  alpha = rr / (p · Ap)
    x += alpha p;  r -= alpha Ap
    rr_new = r · r;  p = r + (rr_new / rr) p;  rr = rr_new

Every vector and every scalar (``alpha``, ``rr``) is logical data in device memory, and
``A`` is a bundle of row blocks (``ctx.bundle``, each block its own logical data,
``stf.constant``: read-only through the bundle), one dependency and one argument of
the matrix-vector task, whose body multiplies block by block. Each line above is a
task whose body is ``t.run(fn)``: ``fn(xp, *arrays)`` with NumPy
on the emulated backend and CuPy on CUDA, so one body serves both. stflow infers the
dependencies from the declared accesses: the updates of ``x`` and ``r`` both wait for
``alpha`` only, so they run side by side.

The loop itself is a Python loop: the host submits ``--check-every`` iterations, then
``ctx.wait(rr)`` blocks until the squared residual norm is known and copies it back,
and the host decides whether to go on (``‖r‖ ≤ tol · ‖b‖``). Between two checks the
host never waits, so submission runs ahead of the device. This is the stream-mode form
of ``examples/cg_while_loop.py``, where the device decides by itself in a
``while_loop``. With ``--graph`` (``context(use_graph=True)``) the tasks between two
waits are recorded and launched as one graph: each ``wait`` ends an epoch.

Up to ``check_every - 1`` iterations may run after convergence; the scalar divisions
return 0 on a zero denominator so that these extra iterations leave an exact solution
as it is. The answer is checked against ``numpy.linalg.solve``.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

import stflow as stf
from stflow import linalg


def _ratio(xp: Any, num: Any, den: Any) -> Any:
    """``num / den``, 0 where ``den`` is 0 (device-side; no host read)."""
    nonzero = den != 0
    return xp.where(nonzero, num / xp.where(nonzero, den, 1.0), 0.0)


# Task bodies: fn(xp, *arrays), enqueued in the task's stream order by t.run. Products
# go through stflow.linalg (NumPy; cuBLAS on CUDA, which graph mode can record where
# CuPy's own dot and @ refuse).
def _dot_of(xp: Any, a: Any, b: Any) -> Any:
    """``a · b`` as a one-element array of ``xp``."""
    out = xp.empty(1, dtype=a.dtype)
    linalg.dot(a, b, out)
    return out


def _squared_norm(xp: Any, r: Any, rr: Any) -> None:
    linalg.dot(r, r, rr)


def _matvec(xp: Any, A: Any, p: Any, Ap: Any) -> None:
    start = 0  # A: the bundle's named tuple of row blocks
    for block in A:
        stop = start + block.shape[0]
        linalg.gemv(block, p, Ap[start:stop])
        start = stop


def row_blocks(ctx: Any, A_host: np.ndarray, count: int) -> Any:
    """``A_host`` as a bundle of ``count`` row blocks (views of it: nothing is
    copied on the host), each read-only through the bundle."""
    bounds = np.linspace(0, A_host.shape[0], min(count, A_host.shape[0]) + 1).astype(int)
    return ctx.bundle(
        **{
            f"rows{k}": stf.constant(
                ctx.logical_data(A_host[lo:hi], name=f"A[{lo}:{hi}]")
            )
            for k, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:]))
        }
    )


def _step(xp: Any, p: Any, Ap: Any, rr: Any, alpha: Any) -> None:
    alpha[...] = _ratio(xp, rr, _dot_of(xp, p, Ap))


def _axpy(xp: Any, y: Any, v: Any, alpha: Any) -> None:
    y += alpha * v


def _axmy(xp: Any, y: Any, v: Any, alpha: Any) -> None:
    y -= alpha * v


def _direction(xp: Any, r: Any, p: Any, rr: Any) -> None:
    rr_new = _dot_of(xp, r, r)
    p[...] = r + _ratio(xp, rr_new, rr) * p
    rr[...] = rr_new


def solve(
    A_host: np.ndarray,
    b_host: np.ndarray,
    tol: float = 1e-10,
    max_iterations: int = 1000,
    check_every: int = 10,
    backend: str | None = None,
    use_graph: bool = False,
    blocks: int = 4,
) -> tuple[np.ndarray, int, float]:
    """``x`` with ``A x = b``, the iterations run and the last residual ``‖r‖ / ‖b‖``.

    The host reads the residual (``ctx.wait``) after every ``check_every`` iterations
    and stops once ``‖r‖ ≤ tol · ‖b‖`` or after ``max_iterations``.
    """
    n = b_host.size
    if A_host.shape != (n, n):
        raise ValueError(f"A must be {n}x{n} to match b, got shape {A_host.shape}")
    if check_every < 1:
        raise ValueError(f"check_every must be at least 1, got {check_every}")
    b_norm = float(np.linalg.norm(b_host)) or 1.0
    x_host = np.zeros(n)
    ctx = stf.context(backend=backend, use_graph=use_graph)
    A = row_blocks(ctx, np.ascontiguousarray(A_host), blocks)  # copied to a device once
    x = ctx.logical_data(x_host, name="x")  # written back at finalize()
    r = ctx.logical_data(b_host.astype(np.float64), name="r")  # x = 0: r = b
    p = ctx.logical_data(b_host.astype(np.float64), name="p")
    Ap = ctx.logical_data_empty((n,), np.float64, name="Ap")
    alpha = ctx.logical_data_empty((1,), np.float64, name="alpha")
    rr = ctx.logical_data_empty((1,), np.float64, name="rr")
    with ctx.task(r.read(), rr.write(), symbol="r.r") as t:
        t.run(_squared_norm)
    iterations = 0
    residual = 1.0
    while iterations < max_iterations:
        for _ in range(min(check_every, max_iterations - iterations)):
            with ctx.task(A.read(), p.read(), Ap.write(), symbol="Ap = A p") as t:
                t.run(_matvec)
            with ctx.task(
                p.read(), Ap.read(), rr.read(), alpha.write(), symbol="alpha"
            ) as t:
                t.run(_step)
            with ctx.task(x.rw(), p.read(), alpha.read(), symbol="x += alpha p") as t:
                t.run(_axpy)
            with ctx.task(r.rw(), Ap.read(), alpha.read(), symbol="r -= alpha Ap") as t:
                t.run(_axmy)
            with ctx.task(r.read(), p.rw(), rr.rw(), symbol="p = r + beta p") as t:
                t.run(_direction)
            iterations += 1
        residual = float(np.sqrt(ctx.wait(rr)[0])) / b_norm  # the host blocks here
        if residual <= tol:
            break
    ctx.finalize()
    return x_host, iterations, residual


def spd_system(n: int, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """A random symmetric positive definite ``A`` (eigenvalues in about [0.05, 4])
    and a random ``b``."""
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((n, n))
    return M @ M.T / n + 0.05 * np.eye(n), rng.standard_normal(n)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=512, help="matrix size")
    parser.add_argument(
        "--tol", type=float, default=1e-10, help="stop when |r| <= tol |b|"
    )
    parser.add_argument("--max-iterations", type=int, default=2000)
    parser.add_argument(
        "--check-every",
        type=int,
        default=10,
        help="iterations submitted between two host reads of |r|",
    )
    parser.add_argument(
        "--graph",
        action="store_true",
        help="graph mode: the tasks between two reads form one graph",
    )
    parser.add_argument("--backend", default="auto", choices=["auto", "cuda", "emulated"])
    args = parser.parse_args(argv)
    backend = None if args.backend == "auto" else args.backend
    A, b = spd_system(args.n)
    start = time.perf_counter()
    x, iterations, residual = solve(
        A, b, args.tol, args.max_iterations, args.check_every, backend, args.graph
    )
    elapsed = time.perf_counter() - start
    error = float(np.linalg.norm(x - np.linalg.solve(A, b)) / np.linalg.norm(b))
    ok = bool(error < 1e-6 and residual <= args.tol)
    print(
        f"{'PASS' if ok else 'FAIL'}: CG n={args.n}, {iterations} iterations "
        f"({'graph' if args.graph else 'stream'} mode, residual read every "
        f"{args.check_every}), |r|/|b| = {residual:.2e}, relative error vs "
        f"numpy.linalg.solve {error:.2e}, {elapsed:.2f} s"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
