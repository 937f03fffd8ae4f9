"""The demo's blocked conjugate gradient over MPI ranks (``--distributed``).

Run it with ``mpiexec -n 4 python -m stflow.demo --distributed`` (any number of ranks,
one included; as root add ``--oversubscribe`` and set ``OMPI_ALLOW_RUN_AS_ROOT=1
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1``).

It is the program of :mod:`stflow.demo` (the same problem, the same kernels, the same
NumPy reference) written against ``stf.distributed_context``:

- the row strips (the *blocks*) are owned block-wise by the ranks: block ``k`` of
  ``B`` by rank ``k * P // B``, and so is every vector piece of that block (``x``,
  ``b``, ``r``, ``p``, ``A p``, its halo rows); a block's tasks execute on its owner,
  on one of that rank's devices;
- the dot products are reductions across ranks: every ``matvec`` and ``update`` task
  adds its block's share into one scalar with ``reduce("sum")``, each rank into a
  partial of its own, and the ``alpha`` and ``beta`` tasks (on rank 0) read the sum
  (one message per rank, combined in rank order) and set it back to zero;
- halo rows travel only between neighbouring ranks, and the scalars ``alpha`` and
  ``beta`` from rank 0 to the ranks that need them, because the tasks say what they
  read and write.

Every rank checks the whole answer against the sequential NumPy CG (the owners' row
strips are summed over the communicator) and returns the same exit code; rank 0
prints the progress, the verdict and the timing.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ._demo_core import (_TINY, TOLERANCE, _alpha, _beta, _copy_edges, _direction,
                         _init_scalars, _matvec_kernel, _report, _select_backend, _size,
                         _start, _update, halo_reads, layout, poisson_matvec, poisson_rhs,
                         reference_cg, row_blocks)

__all__ = ["DistributedSolveResult", "main", "solve_distributed"]


@dataclass
class DistributedSolveResult:
    """What :func:`solve_distributed` did, on this rank."""

    x: np.ndarray
    """The ``n × n`` solution, the same on every rank."""
    tasks: int
    """Tasks and host callbacks submitted (every rank submits all of them)."""
    executed: int
    """Of those, the ones that executed on this rank."""
    seconds: float
    """Wall time on this rank from the first submission to the end of
    ``finalize()``."""
    ranks_used: int
    """Ranks owning at least one block."""
    blocks: int


def _consume(kernel: Callable[..., None]) -> Callable[..., None]:
    """``kernel(xp, scalars, total)`` (``alpha`` or ``beta`` of the demo, given the sum
    of the shares), then ``total = 0``: the next round of ``reduce("sum")`` into it
    starts from zero."""
    def consume(xp: Any, scalars: Any, total: Any) -> None:
        kernel(xp, scalars, total)
        total[...] = 0.0
    return consume


def solve_distributed(comm: Any, b: np.ndarray, iterations: int, *,
                      backend: str = "auto", blocks: int | None = None,
                      devices: int | None = None, report_every: int = 0,
                      graph: bool = False,
                      out: Callable[[str], Any] = print) -> DistributedSolveResult:
    """Solve ``A x = b`` with ``iterations`` steps of blocked CG over the ranks of
    ``comm`` (collective: every rank calls it with the same arguments).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The ranks to spread the blocks over.
    b : numpy.ndarray
        The ``n × n`` right-hand side (the same on every rank).
    iterations : int
        CG iterations.
    backend : str
        Each rank's local backend (``stflow.context(backend=...)``).
    blocks : int, optional
        Row strips (default: two per rank, at most ``n``).
    devices : int, optional
        Devices of each rank to spread its blocks over (default: all of them).
    report_every : int
        Rank 0 prints the relative residual every that many iterations (0: never).
    graph : bool
        Each rank's local context records its tasks as CUDA graphs (graph mode):
        the tasks between two exchanges of a rank are one graph.
    out : callable
        Where rank 0's progress lines go.

    Notes
    -----
    Each rank's user array of ``x`` receives, at ``finalize()``, the strips that rank
    owns; the returned ``x`` is their sum over ``comm`` (``Allreduce``), the whole
    solution on every rank.
    """
    import stflow as stf
    from stflow.backends import get_backend

    size, rank = int(comm.Get_size()), int(comm.Get_rank())
    n = b.shape[0]
    ranks_used, blocks = layout(n, size, None, blocks)
    strips = row_blocks(n, blocks)
    owner = [k * ranks_used // blocks for k in range(blocks)]
    x_full = np.zeros_like(b)
    b_full = np.array(b, dtype=np.float64, order="C")
    b_full.setflags(write=False)
    tasks = executed = 0
    comm.Barrier()
    started = time.perf_counter()
    with stf.distributed_context(comm, backend=backend, use_graph=graph) as ctx:
        available = get_backend(ctx.local.backend).device_count
        local_devices = available if devices is None else min(devices, available)
        # A rank's blocks go round its devices, in the order it owns them.
        device = [owner[:k].count(owner[k]) % local_devices for k in range(blocks)]

        def task(k: int | None, kernel: Callable[..., None], *deps: Any) -> None:
            """``kernel(xp, *arrays)`` on the owner of block ``k`` (rank 0 and its
            first device for ``None``)."""
            nonlocal tasks, executed
            tasks += 1
            where = 0 if k is None else device[k]
            with ctx.task(*deps, rank=0 if k is None else owner[k],
                          place=stf.exec_place.device(where)) as t:
                executed += t.runs_here
                t.run(kernel)

        def piece(name: str, k: int, shape: tuple[int, ...]) -> Any:
            return ctx.logical_data_empty(shape, np.float64, owner=owner[k],
                                          name=f"{name}[{k}]")

        rows = [z - a for a, z in strips]
        x = [ctx.logical_data(x_full[a:z], owner=owner[k], name=f"x[{k}]")
             for k, (a, z) in enumerate(strips)]
        rhs = [ctx.logical_data(b_full[a:z], owner=owner[k], name=f"b[{k}]")
               for k, (a, z) in enumerate(strips)]
        r = [piece("r", k, (rows[k], n)) for k in range(blocks)]
        p = [piece("p", k, (rows[k], n)) for k in range(blocks)]
        ap = [piece("Ap", k, (rows[k], n)) for k in range(blocks)]
        top = [piece("top", k, (n,)) for k in range(blocks)]
        bottom = [piece("bottom", k, (n,)) for k in range(blocks)]
        rr_part = [piece("rr", k, (1,)) for k in range(blocks)]
        # The dot products of one iteration: every block reduces its share into them.
        pap = ctx.logical_data(np.zeros(1), owner=0, name="pAp")
        rr = ctx.logical_data(np.zeros(1), owner=0, name="rr")
        scalars = ctx.logical_data_empty((5,), np.float64, owner=0, name="scalars")

        for k in range(blocks):
            task(k, _start, rhs[k].read(), r[k].write(), p[k].write(),
                 rr_part[k].write())
        task(None, _init_scalars, scalars.write(), *(part.read() for part in rr_part))

        for it in range(1, iterations + 1):
            for k in range(blocks):
                task(k, _copy_edges, p[k].read(), top[k].write(), bottom[k].write())
            for k in range(blocks):
                halos = halo_reads(k, top, bottom)
                # The kernel writes the block's p·Ap into its view of pAp, which
                # holds 0 under reduce("sum"): the share to add.
                task(k, _matvec_kernel(k > 0, k < blocks - 1), p[k].read(), *halos,
                     ap[k].write(), pap.reduce("sum"))
            task(None, _consume(_alpha), scalars.rw(), pap.rw())
            for k in range(blocks):
                task(k, _update, scalars.read(), p[k].read(), ap[k].read(), x[k].rw(),
                     r[k].rw(), rr.reduce("sum"))
            task(None, _consume(_beta), scalars.rw(), rr.rw())
            for k in range(blocks):
                task(k, _direction, scalars.read(), r[k].read(), p[k].rw())
            if report_every and (it % report_every == 0 or it == iterations):
                tasks += 1
                executed += rank == 0
                ctx.host_launch(scalars.read(), rank=0,
                                fn=lambda values: _report(values, out))
    seconds = time.perf_counter() - started
    from mpi4py import MPI
    whole = np.empty_like(x_full)
    comm.Allreduce(x_full, whole, op=MPI.SUM)       # each rank holds its own strips
    return DistributedSolveResult(whole, tasks, executed, seconds, ranks_used, blocks)


def main(args: argparse.Namespace, configure_stflow: bool) -> int:
    """``python -m stflow.demo --distributed`` on every rank of ``MPI.COMM_WORLD``;
    returns the exit code (0 PASS, 1 FAIL, 2 no backend or no MPI), the same on every
    rank."""
    import sys
    try:
        from mpi4py import MPI
    except ImportError:
        print("error: --distributed needs mpi4py and an MPI (pip install "
              "'stflow[mpi]'), then: mpiexec -n 2 python -m stflow.demo --distributed",
              file=sys.stderr)
        return 2
    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    try:
        native, note = _select_backend(args, configure_stflow)
    except ImportError as exc:
        print(f"error: rank {rank}: {exc}", file=sys.stderr)
        return 2
    if args.n is None:
        _size(args, native.name)
    n, iterations = args.n, args.iterations
    say: Callable[..., Any] = print if rank == 0 else (lambda *a, **k: None)
    say(f"stflow demo: blocked conjugate gradient, 2-D Poisson, {n}x{n} grid, "
        f"{iterations} iterations, over {size} MPI rank(s)")
    say(f"backend of each rank: {native.name} ({native.describe()})"
        + (f"; {note}" if note else ""))
    # One graph of many iterations (the one-process --graph) cannot hold the
    # exchanges between ranks: here --graph records each rank's work between two
    # exchanges as a graph (stream mode unless asked).
    graph = bool(args.graph)
    warmup = native.gpu_memory if args.warmup is None else args.warmup
    if warmup:
        solve_distributed(comm, poisson_rhs(32), 2, backend=native.name,
                          devices=args.devices, graph=graph)
    b = poisson_rhs(n)
    result = solve_distributed(comm, b, iterations, backend=native.name,
                               blocks=args.blocks, devices=args.devices,
                               report_every=max(1, iterations // 5), graph=graph,
                               out=lambda line: print(line, flush=True))
    say(f"layout: {result.blocks} row block(s) owned block-wise by {result.ranks_used} "
        f"rank(s); dot products reduced across ranks"
        + ("; graph mode: each rank's tasks between two exchanges are one graph"
           if graph else ""))

    started = time.perf_counter()
    expected = reference_cg(b, iterations)
    reference_seconds = time.perf_counter() - started
    scale = max(float(np.abs(expected).max()), _TINY)
    error = float(np.abs(result.x - expected).max())
    passed = bool(np.isfinite(error)) and error <= TOLERANCE * scale
    verdicts = comm.allgather(passed)                # every rank checked the answer
    residual = float(np.linalg.norm(b - poisson_matvec(result.x)) / np.linalg.norm(b))
    slowest = comm.reduce(result.seconds, op=MPI.MAX, root=0)
    executed = comm.gather(result.executed, root=0)
    say(f"result: |b - A x| / |b| = {residual:.3e}, max |x| = {scale:.6g}")
    say(f"check against the sequential NumPy CG on every rank: max error {error:.3e} "
        f"(tolerance {TOLERANCE * scale:.1e}) -> "
        + ("PASS" if all(verdicts) else
           "FAIL on rank(s) " + ", ".join(str(r) for r, ok in enumerate(verdicts)
                                          if not ok)))
    if slowest is not None:                          # rank 0
        per_task = slowest / max(result.tasks, 1) * 1e6
        say(f"timing: {slowest:.3f} s wall (slowest rank) for {result.tasks} tasks, "
            f"executed per rank {executed} ({per_task:.1f} us per task); NumPy "
            f"reference {reference_seconds:.3f} s")
    return 0 if all(verdicts) else 1
