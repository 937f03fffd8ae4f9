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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .core import (
    _TINY,
    TOLERANCE,
    _alpha,
    _beta,
    _copy_edges,
    _direction,
    _init_scalars,
    _matvec_kernel,
    _report,
    _select_backend,
    _size,
    _start,
    _update,
    halo_reads,
    layout,
    poisson_matvec,
    poisson_rhs,
    reference_cg,
    row_blocks,
)

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


def solve_distributed(
    comm: Any,
    b: np.ndarray,
    iterations: int,
    *,
    backend: str = "auto",
    blocks: int | None = None,
    devices: int | None = None,
    report_every: int = 0,
    graph: bool = False,
    out: Callable[[str], Any] = print,
) -> DistributedSolveResult:
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
    comm.Barrier()
    started = time.perf_counter()
    with stf.distributed_context(comm, backend=backend, use_graph=graph) as ctx:
        available = get_backend(ctx.local.backend).device_count
        local_devices = available if devices is None else min(devices, available)
        # A rank's blocks go round its devices, in the order it owns them.
        device = [owner[:k].count(owner[k]) % local_devices for k in range(blocks)]
        cg = _DistributedCG(stf, ctx, owner, device, strips, x_full, b_full)
        cg.start()
        for it in range(1, iterations + 1):
            cg.iteration()
            if report_every and (it % report_every == 0 or it == iterations):
                cg.report(rank, out)
    seconds = time.perf_counter() - started
    from mpi4py import MPI

    whole = np.empty_like(x_full)
    comm.Allreduce(x_full, whole, op=MPI.SUM)  # each rank holds its own strips
    return DistributedSolveResult(
        whole, cg.tasks, cg.executed, seconds, ranks_used, blocks
    )


class _DistributedCG:
    """The logical data of one distributed CG solve in ``ctx`` (block ``k`` owned by
    rank ``owner[k]``, on its device ``device[k]``) and the tasks of its steps,
    counted (``tasks``: all of them, ``executed``: those this rank ran)."""

    def __init__(
        self,
        stf: Any,
        ctx: Any,
        owner: list[int],
        device: list[int],
        strips: list[tuple[int, int]],
        x_full: np.ndarray,
        b_full: np.ndarray,
    ) -> None:
        self.stf, self.ctx, self.owner, self.device = stf, ctx, owner, device
        self.tasks = self.executed = 0
        n = b_full.shape[0]
        blocks = self.blocks = len(strips)

        def piece(name: str, k: int, shape: tuple[int, ...]) -> Any:
            return ctx.logical_data_empty(
                shape, np.float64, owner=owner[k], name=f"{name}[{k}]"
            )

        rows = [z - a for a, z in strips]
        self.x = [
            ctx.logical_data(x_full[a:z], owner=owner[k], name=f"x[{k}]")
            for k, (a, z) in enumerate(strips)
        ]
        self.rhs = [
            ctx.logical_data(b_full[a:z], owner=owner[k], name=f"b[{k}]")
            for k, (a, z) in enumerate(strips)
        ]
        self.r = [piece("r", k, (rows[k], n)) for k in range(blocks)]
        self.p = [piece("p", k, (rows[k], n)) for k in range(blocks)]
        self.ap = [piece("Ap", k, (rows[k], n)) for k in range(blocks)]
        self.top = [piece("top", k, (n,)) for k in range(blocks)]
        self.bottom = [piece("bottom", k, (n,)) for k in range(blocks)]
        self.rr_part = [piece("rr", k, (1,)) for k in range(blocks)]
        # The dot products of one iteration: every block reduces its share into them.
        self.pap = ctx.logical_data(np.zeros(1), owner=0, name="pAp")
        self.rr = ctx.logical_data(np.zeros(1), owner=0, name="rr")
        self.scalars = ctx.logical_data_empty((5,), np.float64, owner=0, name="scalars")

    def task(self, k: int | None, kernel: Callable[..., None], *deps: Any) -> None:
        """``kernel(xp, *arrays)`` on the owner of block ``k`` (rank 0 and its first
        device for ``None``)."""
        self.tasks += 1
        where = 0 if k is None else self.device[k]
        with self.ctx.task(
            *deps,
            rank=0 if k is None else self.owner[k],
            place=self.stf.exec_place.device(where),
        ) as t:
            self.executed += t.runs_here
            t.run(kernel)

    def start(self) -> None:
        """``r = p = b`` and ``r·r`` (``x`` starts at 0)."""
        for k in range(self.blocks):
            self.task(
                k,
                _start,
                self.rhs[k].read(),
                self.r[k].write(),
                self.p[k].write(),
                self.rr_part[k].write(),
            )
        self.task(
            None,
            _init_scalars,
            self.scalars.write(),
            *(part.read() for part in self.rr_part),
        )

    def iteration(self) -> None:
        """One CG step."""
        blocks, task, scalars, p, r = self.blocks, self.task, self.scalars, self.p, self.r
        for k in range(blocks):
            task(k, _copy_edges, p[k].read(), self.top[k].write(), self.bottom[k].write())
        for k in range(blocks):
            halos = halo_reads(k, self.top, self.bottom)
            # The kernel writes the block's p·Ap into its view of pAp, which holds 0
            # under reduce("sum"): the share to add.
            task(
                k,
                _matvec_kernel(k > 0, k < blocks - 1),
                p[k].read(),
                *halos,
                self.ap[k].write(),
                self.pap.reduce("sum"),
            )
        task(None, _consume(_alpha), scalars.rw(), self.pap.rw())
        for k in range(blocks):
            task(
                k,
                _update,
                scalars.read(),
                p[k].read(),
                self.ap[k].read(),
                self.x[k].rw(),
                r[k].rw(),
                self.rr.reduce("sum"),
            )
        task(None, _consume(_beta), scalars.rw(), self.rr.rw())
        for k in range(blocks):
            task(k, _direction, scalars.read(), r[k].read(), p[k].rw())

    def report(self, rank: int, out: Callable[[str], Any]) -> None:
        """Rank 0 prints the relative residual (a host callback)."""
        self.tasks += 1
        self.executed += rank == 0
        self.ctx.host_launch(
            self.scalars.read(), rank=0, fn=lambda values: _report(values, out)
        )


def main(args: argparse.Namespace, configure_stflow: bool) -> int:
    """``python -m stflow.demo --distributed`` on every rank of ``MPI.COMM_WORLD``;
    returns the exit code (0 PASS, 1 FAIL, 2 no backend or no MPI), the same on every
    rank."""
    import sys

    try:
        from mpi4py import MPI
    except ImportError:
        print(
            "error: --distributed needs mpi4py and an MPI (pip install "
            "'stflow[mpi]'), then: mpiexec -n 2 python -m stflow.demo --distributed",
            file=sys.stderr,
        )
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
    say(
        f"stflow demo: blocked conjugate gradient, 2-D Poisson, {n}x{n} grid, "
        f"{iterations} iterations, over {size} MPI rank(s)"
    )
    say(
        f"backend of each rank: {native.name} ({native.describe()})"
        + (f"; {note}" if note else "")
    )
    # One graph of many iterations (the one-process --graph) cannot hold the
    # exchanges between ranks: here --graph records each rank's work between two
    # exchanges as a graph (stream mode unless asked).
    graph = bool(args.graph)
    warmup = native.gpu_memory if args.warmup is None else args.warmup
    b = poisson_rhs(n)
    result = _solve_printing(comm, b, args, native.name, graph, warmup, say)
    return 0 if _check_and_print(comm, b, iterations, result, say) else 1


def _solve_printing(
    comm: Any,
    b: np.ndarray,
    args: argparse.Namespace,
    backend: str,
    graph: bool,
    warmup: bool,
    say: Callable[..., Any],
) -> DistributedSolveResult:
    """The demo's solve over the ranks of ``comm`` (rank 0 printing the residual every
    fifth of the iterations), then its layout; ``warmup``: after a solve of a tiny
    problem, so that compiling the kernels is not timed."""
    iterations = args.iterations
    if warmup:
        solve_distributed(
            comm,
            poisson_rhs(32),
            2,
            backend=backend,
            devices=args.devices,
            graph=graph,
        )
    result = solve_distributed(
        comm,
        b,
        iterations,
        backend=backend,
        blocks=args.blocks,
        devices=args.devices,
        report_every=max(1, iterations // 5),
        graph=graph,
        out=lambda line: print(line, flush=True),
    )
    say(
        f"layout: {result.blocks} row block(s) owned block-wise by {result.ranks_used} "
        f"rank(s); dot products reduced across ranks"
        + (
            "; graph mode: each rank's tasks between two exchanges are one graph"
            if graph
            else ""
        )
    )
    return result


def _check_and_print(
    comm: Any,
    b: np.ndarray,
    iterations: int,
    result: DistributedSolveResult,
    say: Callable[..., Any],
) -> bool:
    """Check ``result`` against the NumPy reference on every rank; rank 0 prints the
    verdicts of all ranks and the timing of the slowest. Returns whether every rank
    passed (the same on every rank)."""
    from mpi4py import MPI

    started = time.perf_counter()
    expected = reference_cg(b, iterations)
    reference_seconds = time.perf_counter() - started
    scale = max(float(np.abs(expected).max()), _TINY)
    error = float(np.abs(result.x - expected).max())
    passed = bool(np.isfinite(error)) and error <= TOLERANCE * scale
    verdicts = comm.allgather(passed)  # every rank checked the answer
    residual = float(np.linalg.norm(b - poisson_matvec(result.x)) / np.linalg.norm(b))
    slowest = comm.reduce(result.seconds, op=MPI.MAX, root=0)
    executed = comm.gather(result.executed, root=0)
    say(f"result: |b - A x| / |b| = {residual:.3e}, max |x| = {scale:.6g}")
    say(
        f"check against the sequential NumPy CG on every rank: max error {error:.3e} "
        f"(tolerance {TOLERANCE * scale:.1e}) -> "
        + (
            "PASS"
            if all(verdicts)
            else "FAIL on rank(s) "
            + ", ".join(str(r) for r, ok in enumerate(verdicts) if not ok)
        )
    )
    if slowest is not None:  # rank 0
        per_task = slowest / max(result.tasks, 1) * 1e6
        say(
            f"timing: {slowest:.3f} s wall (slowest rank) for {result.tasks} tasks, "
            f"executed per rank {executed} ({per_task:.1f} us per task); NumPy "
            f"reference {reference_seconds:.3f} s"
        )
    return all(verdicts)
