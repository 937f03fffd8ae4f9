"""Tiled Cholesky factorisation, A = L Lᵀ, with one task per tile operation.

    python examples/cholesky.py [--n 1024] [--nb 128] [--graph] [--devices D]
                                [--backend auto|cuda|emulated] [--no-check] [--runs R]

The matrix is cut into ``nb × nb`` tiles by ``stf.tiles`` (each tile a logical data
registered in place: a strided view of the matrix, moved to the device by one pitched
copy and written back into the matrix; only the tiles of the lower triangle, which is
all the factorisation reads). The factor is a new matrix whose tiles are first written
on the devices from the tiles of ``A`` (or, with ``overwrite_a``, ``A`` itself,
factorised in place, its upper triangle zeroed on the host meanwhile by a thread of
the example's): nothing is copied on the host.
For every column ``k`` of tiles::

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

The printed time is end to end: the whole ``cholesky(a)`` call a user makes, from
the NumPy matrix to the NumPy factor (context, page-locking, transfers, the
factorisation, the write-back at ``finalize()``); ``benchmarks/b8_end_to_end.py``
compares it with CuPy and PyTorch doing the same. ``--devices D`` spreads the tiles
over ``D`` devices of one process, 2-D block-cyclic (``stf.block_cyclic.over(D)``,
the distribution of ``examples/cholesky_distributed.py`` over ranks): each task
executes on the device of the tile it writes, and the runtime moves the tiles it
reads from other devices; the tiles are put on their devices first, and the time is
then the factorisation's alone, until its work completed (``settle``).

The first factorisation of a process also pays for what libraries set up on first
use: on CUDA, a cuBLAS and a cuSOLVER handle with their workspaces per task stream
(about 0.25 s at n = 32768 on an H200, as much as the factorisation itself).
``--runs R`` factorises ``R`` times, each in a fresh context, and prints the first
time and the best of the others.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import stflow as stf
from stflow import linalg
from stflow.backends import get_backend


def spd_matrix(n: int, seed: int = 0) -> np.ndarray:
    """A random symmetric positive definite matrix (diagonally dominant)."""
    rng = np.random.default_rng(seed)
    r = rng.uniform(-1.0, 1.0, (n, n))
    return r + r.T + 2.0 * n * np.eye(n)


# The four tile kernels, fn(xp, *tiles) bodies for t.run. stflow.linalg makes the same
# call on both backends: NumPy on the emulated one, cuBLAS / cuSOLVER on the task's
# stream on CUDA, which also works while graph mode records (CuPy's own ``@`` and
# ``cupy.linalg`` refuse to be captured).
def potrf(xp: Any, a: Any) -> None:  # a = chol(a), lower
    linalg.potrf(a)


def trsm(xp: Any, l: Any, b: Any) -> None:  # b = b · l⁻ᵀ
    linalg.trsm(l, b, side="right", trans=True)


def syrk(xp: Any, a: Any, c: Any) -> None:  # c -= a · aᵀ (lower)
    linalg.syrk(a, c, alpha=-1.0, beta=1.0)


def gemm(xp: Any, a: Any, b: Any, c: Any) -> None:  # c -= a · bᵀ
    linalg.gemm(a, b, c, alpha=-1.0, beta=1.0, trans_b=True)


def factorize(
    ctx: Any,
    tiles: dict[tuple[int, int], Any],
    count: int,
    where: Callable[[int, int], Any] | None = None,
    finished: Callable[[int, int], None] | None = None,
) -> None:
    """Submit the tiled factorisation of the ``count × count`` lower tiles; with
    ``where``, the task writing tile ``(i, j)`` executes on ``where(i, j)``;
    ``finished(i, j)`` is called once the last task writing tile ``(i, j)`` is
    submitted (to submit what follows it at once: its write-back)."""

    def on(i: int, j: int) -> tuple[Any, ...]:
        return () if where is None else (where(i, j),)

    for k in range(count):
        with ctx.task(*on(k, k), tiles[k, k].rw(), symbol=f"potrf({k})") as t:
            t.run(potrf)
        if finished is not None:
            finished(k, k)
        for i in range(k + 1, count):
            with ctx.task(
                *on(i, k), tiles[k, k].read(), tiles[i, k].rw(), symbol=f"trsm({i},{k})"
            ) as t:
                t.run(trsm)
            if finished is not None:
                finished(i, k)
        for i in range(k + 1, count):
            with ctx.task(
                *on(i, i), tiles[i, k].read(), tiles[i, i].rw(), symbol=f"syrk({i},{k})"
            ) as t:
                t.run(syrk)
            for j in range(k + 1, i):
                with ctx.task(
                    *on(i, j),
                    tiles[i, k].read(),
                    tiles[j, k].read(),
                    tiles[i, j].rw(),
                    symbol=f"gemm({i},{j},{k})",
                ) as t:
                    t.run(gemm)


def settle(
    ctx: Any, tiles: dict[tuple[int, int], Any], device_of: Callable[[int, int], int]
) -> None:
    """Block until the work submitted on ``tiles`` completed, leaving them where they
    are (``fence()`` does not block): on each device, a task reading the tiles there
    writes a flag, which ``ctx.wait`` brings back (8 bytes)."""
    flags = []
    for device in sorted({device_of(i, j) for i, j in tiles}):
        flag = ctx.logical_data(np.zeros(1), name=f"settled{device}")
        here = [
            tile.read() for (i, j), tile in tiles.items() if device_of(i, j) == device
        ]
        with ctx.task(stf.exec_place.device(device), flag.rw(), *here):
            pass
        flags.append(flag)
    for flag in flags:
        ctx.wait(flag)


def cholesky(
    a: np.ndarray,
    nb: int,
    backend: str | None = None,
    use_graph: bool = False,
    devices: int = 0,
    overwrite_a: bool = False,
    memory_budget: Any = None,
) -> tuple[np.ndarray, float]:
    """The lower Cholesky factor of ``a`` in tiles of ``nb`` (the last row and column
    of tiles take what is left; the upper triangle zero), and the seconds the call
    took: end to end, from the NumPy matrix to the NumPy factor (the context, the
    page-locking, every transfer, the factorisation, the write-back). With
    ``devices``, the tiles spread block-cyclic over that many devices and the
    seconds of the factorisation alone (see the module docstring).

    ``overwrite_a`` factorises ``a`` in place (as LAPACK and SciPy's ``overwrite_a``)
    and returns it; otherwise the factor is a new array, written on the devices
    from ``a``'s tiles: ``a`` is only read, and neither is copied on the host.
    ``memory_budget`` (bytes per device) is the context's: tiles beyond it are
    evicted to the host and brought back when needed.
    """
    start = time.perf_counter()
    n = a.shape[0]
    if a.ndim != 2 or a.shape != (n, n):
        raise ValueError(f"a must be a square matrix, got shape {a.shape}")
    count = -(-n // nb)
    ctx = stf.context(backend=backend, use_graph=use_graph, memory_budget=memory_budget)
    zeros = None
    if overwrite_a:
        result = a
        grid = stf.tiles(ctx, result, nb, name="A", triangle="lower")  # in place
        sources = None
    else:
        result = np.zeros(a.shape, a.dtype)  # calloc'd: the upper triangle stays 0
        grid = stf.tiles(ctx, result, nb, name="L", triangle="lower")
        original = a.view()
        original.flags.writeable = False
        sources = stf.tiles(ctx, original, nb, name="A", triangle="lower")
    tiles = {(i, j): grid[i, j] for i in range(count) for j in range(i + 1)}
    where: Callable[[int, int], Any] | None = None
    device_of: Callable[[int, int], int] = lambda i, j: 0  # noqa: E731
    if devices:
        available = get_backend(ctx.backend).device_count
        if not 0 < devices <= available:
            ctx.finalize()
            raise ValueError(
                f"devices must be between 1 and {available} (the "
                f"{ctx.backend} backend's devices), got {devices}"
            )
        device_of = stf.block_cyclic.over(devices)

        def on_its_device(i: int, j: int) -> Any:
            return stf.exec_place.device(device_of(i, j))

        where = on_its_device
    if overwrite_a:
        # The tiles above the diagonal are not registered: zeroed here, on the host,
        # while the factorisation runs (NumPy releases the interpreter as it fills).
        zeros = threading.Thread(target=_zero_upper_tiles, args=(result, nb))
        zeros.start()
    load(ctx, tiles, sources, where)
    if devices:
        settle(ctx, tiles, device_of)
        start = time.perf_counter()
    finish = _Finisher(ctx, grid, nb, where, store=not devices)
    factorize(ctx, tiles, count, where, finish)
    if devices:
        settle(ctx, tiles, device_of)
        elapsed = time.perf_counter() - start  # the factorisation alone
    ctx.finalize()
    if zeros is not None:
        zeros.join()
    if not devices:
        elapsed = time.perf_counter() - start  # end to end
    return result, elapsed


def _zero_upper_tiles(a: np.ndarray, nb: int) -> None:
    """Zero the blocks of ``a`` right of its diagonal tiles (a row of tiles at a
    time; the diagonal tiles' own upper parts are cleared on the devices)."""
    for top in range(0, a.shape[0], nb):
        a[top : top + nb, top + nb :] = 0


def load(
    ctx: Any,
    tiles: dict[tuple[int, int], Any],
    sources: Any,
    where: Callable[[int, int], Any] | None,
) -> None:
    """Bring the tiles where their first task runs: copies of the tiles of ``a``
    into the factor's (on the devices), or, with ``where`` and no ``sources``, each
    tile onto its device."""
    if sources is None and where is None:
        return  # the first tasks move the tiles
    for (i, j), tile in tiles.items():
        on = () if where is None else (where(i, j),)
        if sources is None:
            with ctx.task(*on, tile.rw(), symbol=f"load({i},{j})"):
                pass
        else:
            with ctx.task(
                *on, sources[i, j].read(), tile.write(), symbol=f"load({i},{j})"
            ) as t:
                t.run(_assign)


def _assign(xp: Any, source: Any, target: Any) -> None:
    target[...] = source


class _Finisher:
    """What follows the last writer of a tile of the factor: a diagonal tile's upper
    part cleared (a mask kept on the devices) and, without ``--devices``, the tile
    written back into the matrix at once (``store``), while the factorisation goes
    on."""

    def __init__(
        self,
        ctx: Any,
        grid: Any,
        nb: int,
        where: Callable[[int, int], Any] | None,
        store: bool,
    ) -> None:
        self.ctx, self.grid, self.where, self.store = ctx, grid, where, store
        self.mask = ctx.logical_data(np.tril(np.ones((nb, nb))), name="lower")

    def __call__(self, i: int, j: int) -> None:
        ctx, grid, where = self.ctx, self.grid, self.where
        if i == j:
            on = () if where is None else (where(i, i),)
            with ctx.task(
                *on, self.mask.read(), grid[i, i].rw(), symbol=f"tril({i})"
            ) as t:
                t.run(_keep_lower)
        if self.store:
            store(ctx, grid[i, j], f"store({i},{j})")


def store(ctx: Any, tile: Any, symbol: str) -> None:
    """Start copying ``tile`` back into the matrix as soon as its last writer ends,
    while the factorisation goes on: a host callback reading the tile where it lives
    in the matrix (the runtime cannot know which writer is the last; ``finalize()``
    then has nothing left to copy). Submitted right after the tile's last writer
    (``_Finisher``), the copy back overlaps the rest of the factorisation."""
    ctx.host_launch(tile.read(), fn=_nothing, symbol=symbol)


def _nothing(tile: Any) -> None:
    pass


def _keep_lower(xp: Any, mask: Any, a: Any) -> None:
    rows, cols = a.shape
    xp.multiply(a, mask[:rows, :cols], out=a)


def check_factor(
    a: np.ndarray, lower: np.ndarray, full: bool = True
) -> tuple[bool, str, str]:
    """Whether ``lower`` is ``a``'s Cholesky factor, with a verdict to print before
    the figures and what was measured, after them. ``full``: against
    ``numpy.linalg.cholesky``; else ``L Lᵀ = A`` on a sample of 8 rows (large
    matrices)."""
    if full:
        expected = np.linalg.cholesky(a)
        error = float(np.max(np.abs(lower - expected)) / np.max(np.abs(expected)))
        ok = error < 1e-10
        return ok, f"{'PASS' if ok else 'FAIL'}: ", f", relative error {error:.1e}"
    rows = np.linspace(0, a.shape[0] - 1, 8).astype(int)
    error = float(np.max(np.abs(lower[rows] @ lower.T - a[rows])) / np.max(np.abs(a)))
    ok = error < 1e-10
    return (
        ok,
        f"{'PASS' if ok else 'FAIL'} (8 rows of L Lᵀ): ",
        f", relative residual {error:.1e}",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=512, help="matrix size")
    parser.add_argument("--nb", type=int, default=128, help="tile size")
    parser.add_argument("--graph", action="store_true", help="graph mode")
    parser.add_argument(
        "--devices",
        type=int,
        default=0,
        help="spread the tiles over this many devices (block-cyclic)",
    )
    parser.add_argument("--backend", default="auto", choices=["auto", "cuda", "emulated"])
    parser.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="check L Lᵀ = A on 8 rows instead of comparing with "
        "numpy.linalg.cholesky (large n)",
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=1,
        help="factorise this many times (fresh contexts); the first "
        "time and the best of the others are printed",
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")
    backend = None if args.backend == "auto" else args.backend
    a = spd_matrix(args.n)
    times = []
    for _ in range(args.runs):
        try:
            lower, elapsed = cholesky(a, args.nb, backend, args.graph, args.devices)
        except ValueError as error:  # a bad --devices
            parser.error(str(error))
        times.append(elapsed)
    ok, verdict, checked = check_factor(a, lower, args.check)
    tiles = -(-args.n // args.nb)
    timed = "factorisation" if args.devices else "end to end"
    print(
        f"{verdict}n={args.n}, {tiles}×{tiles} tiles of {args.nb}, "
        f"{'graph' if args.graph else 'stream'} mode"
        f"{f', {args.devices} devices' if args.devices else ''}, {timed}: "
        f"{describe_times(times, args.n)}{checked}"
    )
    return 0 if ok else 1


def describe_times(times: list[float], n: int) -> str:
    """``times`` of factorisations of order ``n``: one, or the first and the best of
    the others (the first pays for the libraries' setup), with their TFLOP/s."""

    def one(seconds: float) -> str:
        return f"{seconds:.3f} s ({n**3 / 3 / seconds / 1e12:.3g} TFLOP/s)"

    if len(times) == 1:
        return one(times[0])
    return (
        f"first run {one(times[0])}, best of {len(times) - 1} more {one(min(times[1:]))}"
    )


if __name__ == "__main__":
    sys.exit(main())
