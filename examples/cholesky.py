"""Tiled Cholesky factorisation, A = L Lᵀ, with one task per tile operation.

    python examples/cholesky.py [--n 1024] [--nb 128] [--graph]
                                [--backend auto|cuda|emulated]

The matrix is cut into ``nb × nb`` tiles by ``stf.tiles`` (each tile a logical data:
a contiguous copy, written back into the matrix at ``finalize()``). For every column
``k`` of tiles::

    POTRF  A[k][k] = chol(A[k][k])
    TRSM   A[i][k] = A[i][k] · A[k][k]⁻ᵀ            for i > k
    SYRK   A[i][i] -= A[i][k] · A[i][k]ᵀ            for i > k
    GEMM   A[i][j] -= A[i][k] · A[j][k]ᵀ            for k < j < i

stflow infers every dependency from the tiles each task reads and writes, so the
updates of different columns overlap as soon as their tiles are ready. The result is
checked against ``numpy.linalg.cholesky``.

Bodies go through ``t.run`` and ``stflow.linalg``: on CUDA, cuSOLVER ``potrf`` and
cuBLAS ``trsm`` / ``syrk`` / ``gemm`` on the task's stream; on the emulated backend,
NumPy enqueued on the task stream. ``examples/potri.py`` and
``benchmarks/b5_cholesky.py`` reuse ``factorize``. ``--graph`` records each epoch as a
CUDA graph (``context(use_graph=True)``): the same calls, captured.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

import stflow as stf
from stflow import linalg


def spd_matrix(n: int, seed: int = 0) -> np.ndarray:
    """A random symmetric positive definite matrix (diagonally dominant)."""
    rng = np.random.default_rng(seed)
    r = rng.uniform(-1.0, 1.0, (n, n))
    return r + r.T + 2.0 * n * np.eye(n)


# The four tile kernels, fn(xp, *tiles) bodies for t.run. stflow.linalg makes the same
# call on both backends: NumPy on the emulated one, cuBLAS / cuSOLVER on the task's
# stream on CUDA, which also works while graph mode records (CuPy's own ``@`` and
# ``cupy.linalg`` refuse to be captured).
def potrf(xp: Any, a: Any) -> None:                     # a = chol(a), lower
    linalg.potrf(a)


def trsm(xp: Any, l: Any, b: Any) -> None:              # b = b · l⁻ᵀ
    linalg.trsm(l, b, side="right", trans=True)


def syrk(xp: Any, a: Any, c: Any) -> None:              # c -= a · aᵀ (lower)
    linalg.syrk(a, c, alpha=-1.0, beta=1.0)


def gemm(xp: Any, a: Any, b: Any, c: Any) -> None:      # c -= a · bᵀ
    linalg.gemm(a, b, c, alpha=-1.0, beta=1.0, trans_b=True)


def factorize(ctx: Any, tiles: dict[tuple[int, int], Any], count: int) -> None:
    """Submit the tiled factorisation of the ``count × count`` lower tiles."""
    for k in range(count):
        with ctx.task(tiles[k, k].rw(), symbol=f"potrf({k})") as t:
            t.run(potrf)
        for i in range(k + 1, count):
            with ctx.task(tiles[k, k].read(), tiles[i, k].rw(),
                          symbol=f"trsm({i},{k})") as t:
                t.run(trsm)
        for i in range(k + 1, count):
            with ctx.task(tiles[i, k].read(), tiles[i, i].rw(),
                          symbol=f"syrk({i},{k})") as t:
                t.run(syrk)
            for j in range(k + 1, i):
                with ctx.task(tiles[i, k].read(), tiles[j, k].read(), tiles[i, j].rw(),
                              symbol=f"gemm({i},{j},{k})") as t:
                    t.run(gemm)


def cholesky(a: np.ndarray, nb: int, backend: str | None = None,
             use_graph: bool = False) -> tuple[np.ndarray, float]:
    """The lower Cholesky factor of ``a`` in tiles of ``nb`` (the last row and column
    of tiles take what is left), and the seconds from the first submission to the
    end of ``finalize()``."""
    n = a.shape[0]
    if a.ndim != 2 or a.shape != (n, n):
        raise ValueError(f"a must be a square matrix, got shape {a.shape}")
    count = -(-n // nb)
    result = a.copy()
    ctx = stf.context(backend=backend, use_graph=use_graph)
    grid = stf.tiles(ctx, result, nb, name="A")    # written back at finalize()
    tiles = {(i, j): grid[i, j] for i in range(count) for j in range(i + 1)}
    start = time.perf_counter()
    factorize(ctx, tiles, count)
    ctx.finalize()
    elapsed = time.perf_counter() - start
    return np.tril(result), elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=512, help="matrix size")
    parser.add_argument("--nb", type=int, default=128, help="tile size")
    parser.add_argument("--graph", action="store_true", help="graph mode")
    parser.add_argument("--backend", default="auto", choices=["auto", "cuda", "emulated"])
    args = parser.parse_args(argv)
    backend = None if args.backend == "auto" else args.backend
    a = spd_matrix(args.n)
    lower, elapsed = cholesky(a, args.nb, backend, args.graph)
    expected = np.linalg.cholesky(a)
    error = float(np.max(np.abs(lower - expected)) / np.max(np.abs(expected)))
    ok = error < 1e-10
    tiles = -(-args.n // args.nb)
    print(f"{'PASS' if ok else 'FAIL'}: n={args.n}, {tiles}×{tiles} tiles of {args.nb}, "
          f"{'graph' if args.graph else 'stream'} mode, {elapsed:.3f} s, "
          f"relative error {error:.1e}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
