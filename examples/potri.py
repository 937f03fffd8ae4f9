"""Tiled POTRI: the inverse of a symmetric positive definite matrix from its Cholesky
factor.

    python examples/potri.py [--n 512] [--nb 128] [--graph]
                             [--backend auto|cuda|emulated]

LAPACK's ``potri`` computes ``A⁻¹`` in three stages, all in place on the lower
triangle of ``A`` cut into ``nb × nb`` tiles by ``stf.tiles`` (each tile one logical
data; the last row and column of tiles are smaller when ``nb`` does not divide ``n``):

1. **POTRF**, ``A = L Lᵀ``: the tiled Cholesky factorisation of
   ``examples/cholesky.py``, reused as it is (its ``factorize``).
2. **TRTRI**, ``L := L⁻¹``. For every column ``k`` of tiles::

       A[m][k] = −A[m][k] · A[k][k]⁻¹            m > k      (TRSM, right)
       A[m][n] += A[m][k] · A[k][n]              m > k > n  (GEMM)
       A[k][n] = A[k][k]⁻¹ · A[k][n]             n < k      (TRSM, left)
       A[k][k] = A[k][k]⁻¹                                  (TRTRI of one tile)

3. **LAUUM**, ``A⁻¹ = L⁻ᵀ L⁻¹`` (``L`` now holding ``L⁻¹``). For every row ``k``::

       A[n][n] += A[k][n]ᵀ · A[k][n]             n < k      (SYRK)
       A[m][n] += A[k][m]ᵀ · A[k][n]             n < m < k  (GEMM)
       A[k][n] = A[k][k]ᵀ · A[k][n]              n < k      (TRMM)
       A[k][k] = A[k][k]ᵀ · A[k][k]                         (LAUUM of one tile)

The three stages are submitted one after the other with no barrier: stflow infers every
dependency from the tiles each task reads and writes, so the inversion of the first
columns starts while the factorisation of the last ones is still running, and the tasks
of each step overlap as their tiles become ready. Bodies are ``t.run(fn)``:
``fn(xp, *tiles)`` with NumPy on the emulated backend and CuPy on CUDA, every step
through ``stflow.linalg`` (``trsm``, ``gemm``, ``syrk``, ``trmm``, and ``trtri`` and
``lauum`` for the diagonal tiles; cuBLAS and cuSOLVER on CUDA through nvmath-python,
``pip install 'stflow[linalg]'``, capturable in graph mode).
``--graph`` records each epoch as a graph (``context(use_graph=True)``). The lower
triangle of the result, mirrored, is checked against ``numpy.linalg.inv``.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys
import time
from types import ModuleType
from typing import Any

import numpy as np

import stflow as stf
from stflow import linalg


def _cholesky_example() -> ModuleType:
    """``examples/cholesky.py``, loaded from this file's directory (as the tests do)."""
    path = pathlib.Path(__file__).resolve().with_name("cholesky.py")
    spec = importlib.util.spec_from_file_location("stflow_example_cholesky", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cholesky_example = _cholesky_example()
spd_matrix = cholesky_example.spd_matrix


# Tile bodies: fn(xp, *tiles), enqueued in the task's stream order by t.run.
# stflow.linalg makes the same call on both backends (NumPy; cuBLAS and cuSOLVER on the
# task stream, capturable in graph mode); only the lower triangle of a diagonal tile is
# read and written, in place: no scratch array.
def _trsm_right(xp: Any, l: Any, b: Any) -> None:  # b = -b · tril(l)⁻¹
    linalg.trsm(l, b, side="right", alpha=-1.0)


def _trsm_left(xp: Any, l: Any, b: Any) -> None:  # b = tril(l)⁻¹ · b
    linalg.trsm(l, b, side="left")


def _trtri(xp: Any, l: Any) -> None:  # tril(l) = tril(l)⁻¹
    linalg.trtri(l)


def _gemm_nn(xp: Any, a: Any, b: Any, c: Any) -> None:  # c += a · b
    linalg.gemm(a, b, c, beta=1.0)


def _syrk_t(xp: Any, a: Any, c: Any) -> None:  # c += aᵀ · a (lower)
    linalg.syrk(a, c, beta=1.0, trans=True)


def _gemm_tn(xp: Any, a: Any, b: Any, c: Any) -> None:  # c += aᵀ · b
    linalg.gemm(a, b, c, beta=1.0, trans_a=True)


def _trmm_t(xp: Any, l: Any, b: Any) -> None:  # b = tril(l)ᵀ · b
    linalg.trmm(l, b, side="left", trans=True)


def _lauum(xp: Any, l: Any) -> None:  # tril(l) = tril(tril(l)ᵀ · tril(l))
    linalg.lauum(l)


def trtri(ctx: Any, tiles: dict[tuple[int, int], Any], count: int) -> None:
    """Submit ``L := L⁻¹`` on the lower ``count × count`` tiles (in place)."""
    for k in range(count):
        for m in range(k + 1, count):
            with ctx.task(
                tiles[k, k].read(), tiles[m, k].rw(), symbol=f"trsm_r({m},{k})"
            ) as t:
                t.run(_trsm_right)
        for m in range(k + 1, count):
            for n in range(k):
                with ctx.task(
                    tiles[m, k].read(),
                    tiles[k, n].read(),
                    tiles[m, n].rw(),
                    symbol=f"gemm({m},{n},{k})",
                ) as t:
                    t.run(_gemm_nn)
        for n in range(k):
            with ctx.task(
                tiles[k, k].read(), tiles[k, n].rw(), symbol=f"trsm_l({k},{n})"
            ) as t:
                t.run(_trsm_left)
        with ctx.task(tiles[k, k].rw(), symbol=f"trtri({k})") as t:
            t.run(_trtri)


def lauum(ctx: Any, tiles: dict[tuple[int, int], Any], count: int) -> None:
    """Submit ``A := Lᵀ L`` (lower triangle) on the lower ``count × count`` tiles."""
    for k in range(count):
        for n in range(k):
            with ctx.task(
                tiles[k, n].read(), tiles[n, n].rw(), symbol=f"syrk({n},{k})"
            ) as t:
                t.run(_syrk_t)
            for m in range(n + 1, k):
                with ctx.task(
                    tiles[k, m].read(),
                    tiles[k, n].read(),
                    tiles[m, n].rw(),
                    symbol=f"gemm_t({m},{n},{k})",
                ) as t:
                    t.run(_gemm_tn)
        for n in range(k):
            with ctx.task(
                tiles[k, k].read(), tiles[k, n].rw(), symbol=f"trmm({k},{n})"
            ) as t:
                t.run(_trmm_t)
        with ctx.task(tiles[k, k].rw(), symbol=f"lauum({k})") as t:
            t.run(_lauum)


def potri(
    a: np.ndarray, nb: int, backend: str | None = None, use_graph: bool = False
) -> tuple[np.ndarray, float]:
    """``a⁻¹`` of a symmetric positive definite ``a`` in tiles of ``nb``, and the
    seconds from the first submission to the end of ``finalize()``."""
    n = a.shape[0]
    if a.ndim != 2 or a.shape != (n, n):
        raise ValueError(f"a must be a square matrix, got shape {a.shape}")
    if nb < 1:
        raise ValueError(f"the tile size must be positive, got {nb}")
    count = -(-n // nb)
    result = np.array(a, dtype=np.float64)
    ctx = stf.context(backend=backend, use_graph=use_graph)
    grid = stf.tiles(ctx, result, nb, name="A")  # written back at finalize()
    tiles = {(i, j): grid[i, j] for i in range(count) for j in range(i + 1)}
    start = time.perf_counter()
    cholesky_example.factorize(ctx, tiles, count)  # A = L Lᵀ
    trtri(ctx, tiles, count)  # L := L⁻¹
    lauum(ctx, tiles, count)  # A⁻¹ = L⁻ᵀ L⁻¹
    ctx.finalize()
    elapsed = time.perf_counter() - start
    lower = np.tril(result)
    return lower + np.tril(lower, -1).T, elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=512, help="matrix size")
    parser.add_argument("--nb", type=int, default=128, help="tile size")
    parser.add_argument("--graph", action="store_true", help="graph mode")
    parser.add_argument("--backend", default="auto", choices=["auto", "cuda", "emulated"])
    args = parser.parse_args(argv)
    backend = None if args.backend == "auto" else args.backend
    a = spd_matrix(args.n)
    inverse, elapsed = potri(a, args.nb, backend, args.graph)
    expected = np.linalg.inv(a)
    error = float(np.max(np.abs(inverse - expected)) / np.max(np.abs(expected)))
    identity = float(np.max(np.abs(inverse @ a - np.eye(args.n))))
    ok = error < 1e-10 and identity < 1e-10
    tiles = -(-args.n // args.nb)
    print(
        f"{'PASS' if ok else 'FAIL'}: POTRI n={args.n}, {tiles}×{tiles} tiles of "
        f"{args.nb}, {'graph' if args.graph else 'stream'} mode, {elapsed:.3f} s, "
        f"relative error vs numpy.linalg.inv {error:.1e}, |A⁻¹A − I| {identity:.1e}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
