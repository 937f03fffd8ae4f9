"""Tiled Cholesky over MPI ranks: the tiles distributed 2-D block-cyclic.

    mpiexec -n 4 python examples/cholesky_distributed.py [--n 1024] [--nb 128]
                                                         [--backend auto|cuda|emulated]
                                                         [--no-check] [--runs R]

The same tasks as ``examples/cholesky.py`` (its ``factorize``, unchanged), submitted to
a ``stf.distributed_context``: every rank runs this program; tile ``(i, j)`` is owned
by rank ``(i mod P) * Q + (j mod Q)`` of a ``P × Q`` grid of ranks (``P × Q`` the
number of ranks, ``P`` the largest divisor not above its square root:
``stf.block_cyclic.over(ranks)``; ``stf.tiles(ctx, A, nb)`` tiles a whole matrix the
same way, here only the lower tiles are made), each task
executes on the owner of the tile it writes, and the tiles a task reads from other
ranks are sent to it (each version once per rank, cached until written again). Every
rank starts from its own tiles only; at the end rank 0 gathers the factor (``wait``,
collective) and checks it against ``numpy.linalg.cholesky``; every rank prints the
verdict and returns the same exit code (``--no-check``, for large matrices: rank 0
checks ``L Lᵀ = A`` on a sample of rows instead). The time printed is the
factorisation's, the tiles already on their owners' devices, until its work completed
on every rank (``settle``). ``--runs R`` factorises ``R`` times, each in a fresh
context, and prints the first time (which pays for the libraries' setup, see
``examples/cholesky.py``) and the best of the others.

Without ``mpiexec`` it runs on one rank; without mpi4py it says what to install
(``pip install 'stflow[mpi]'``) and exits with status 2. On a GPU machine, ``--backend cuda`` makes
each rank's tasks cuBLAS / cuSOLVER calls on its device (rank ``r`` on device ``r``
modulo the devices).
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import stflow as stf


def _cholesky_example() -> Any:
    path = pathlib.Path(__file__).with_name("cholesky.py")
    spec = importlib.util.spec_from_file_location("cholesky_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cholesky_example = _cholesky_example()


def cholesky_distributed(
    comm: Any, a: np.ndarray, nb: int, backend: str | None = None
) -> tuple[np.ndarray | None, float, list[int]]:
    """The lower factor of ``a`` (on rank 0; ``None`` elsewhere), the seconds from the
    first submission to the end of the factorisation on every rank, and the tasks
    each rank executed."""
    n = a.shape[0]
    count = -(-n // nb)
    owners = stf.block_cyclic.over(comm.Get_size())  # tile (i, j) -> its rank
    edges = [min(k * nb, n) for k in range(count + 1)]
    rank = comm.Get_rank()
    executed = 0
    with stf.distributed_context(comm, backend=backend) as ctx:
        tiles = {}
        for i in range(count):
            for j in range(i + 1):
                owner = owners(i, j)
                # Only the owner's array is read (a copy of the block); elsewhere the
                # data takes its shape and dtype from the view, and no memory.
                block = a[edges[i] : edges[i + 1], edges[j] : edges[j + 1]]
                if owner == rank:
                    block = np.ascontiguousarray(block)
                tiles[i, j] = ctx.logical_data(block, owner=owner, name=f"A[{i},{j}]")
        for tile in tiles.values():  # each tile onto its owner's device first
            with ctx.task(tile.rw()):
                pass
        settle(ctx, tiles, owners)
        comm.Barrier()
        start = time.perf_counter()
        counting = _Counting(ctx)
        cholesky_example.factorize(counting, tiles, count)
        settle(ctx, tiles, owners)
        seconds = time.perf_counter() - start
        executed = counting.here
        values = {key: ctx.wait(tile) for key, tile in tiles.items()}  # collective
    counts = comm.allgather(executed)
    if rank != 0:
        return None, seconds, counts
    lower = np.zeros_like(a)
    for (i, j), value in values.items():
        lower[edges[i] : edges[i + 1], edges[j] : edges[j + 1]] = value
    return np.tril(lower), seconds, counts


def settle(
    ctx: Any, tiles: dict[tuple[int, int], Any], owners: Callable[[int, int], int]
) -> None:
    """Block every rank until the work submitted on ``tiles`` completed on every
    rank, leaving them where they are (``fence()`` does not wait for the devices):
    on each rank, a task reading its tiles writes a flag of its own, and every rank
    waits for every flag (``wait`` is collective: 8 bytes broadcast per rank)."""
    flags = []
    for rank in range(ctx.size):
        flag = ctx.logical_data(np.zeros(1), owner=rank, name=f"settled{rank}")
        mine = [tile.read() for (i, j), tile in tiles.items() if owners(i, j) == rank]
        with ctx.task(flag.rw(), *mine):
            pass
        flags.append(flag)
    for flag in flags:
        ctx.wait(flag)


class _Counting:
    """The distributed context as ``factorize`` sees it, counting the tasks that
    execute on this rank."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.here = 0

    def task(self, *deps: Any, **options: Any) -> Any:
        t = self.ctx.task(*deps, **options)
        self.here += t.runs_here
        return t


def main(argv: list[str] | None = None, comm: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=512, help="matrix size")
    parser.add_argument("--nb", type=int, default=128, help="tile size")
    parser.add_argument("--backend", default="auto", choices=["auto", "cuda", "emulated"])
    parser.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="skip the comparison with numpy.linalg.cholesky (large n)",
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
    if comm is None:
        try:
            from mpi4py import MPI
        except ImportError:
            print(
                "error: examples/cholesky_distributed.py needs mpi4py and an MPI "
                "(pip install 'stflow[mpi]'), then: mpiexec -n 4 python "
                "examples/cholesky_distributed.py",
                file=sys.stderr,
            )
            return 2
        comm = MPI.COMM_WORLD
    backend = None if args.backend == "auto" else args.backend
    a = cholesky_example.spd_matrix(args.n)
    times = []
    for _ in range(args.runs):
        lower, seconds, counts = cholesky_distributed(comm, a, args.nb, backend)
        times.append(max(comm.allgather(seconds)))  # the slowest rank's
    ok = True
    if comm.Get_rank() == 0:
        assert lower is not None
        ok, verdict, checked = cholesky_example.check_factor(a, lower, args.check)
        tiles = -(-args.n // args.nb)
        grid = stf.block_cyclic.over(comm.Get_size())
        p, q = grid.p, grid.q
        print(
            f"{verdict}n={args.n}, {tiles}×{tiles} tiles of {args.nb} over "
            f"{comm.Get_size()} rank(s) ({p}×{q} block-cyclic), tasks per rank "
            f"{counts}, {cholesky_example.describe_times(times, args.n)}{checked}"
        )
    ok = comm.bcast(ok, root=0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
