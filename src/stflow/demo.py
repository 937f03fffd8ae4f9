"""A blocked conjugate-gradient solve of a 2-D Poisson problem, spread over devices.

Run it with ``python -m stflow.demo`` (``--help`` lists the options).

The problem
-----------
``-Δu = 1`` on the unit square with ``u = 0`` on the boundary, discretised with the
5-point stencil on an ``n × n`` interior grid: ``A u = b`` with ``A = 4 I - (the four
neighbours)`` and ``b = h² · 1``. ``A`` is symmetric positive definite, so the
conjugate-gradient method (CG) solves it.

How the work is split
---------------------
The grid is cut into horizontal strips of rows, the *blocks*; block ``k`` lives on
device ``k % devices``. Every vector of CG (``x``, ``r``, ``p``, ``A p``) is one
logical data per block, and so is every partial dot product. One iteration is::

    halo(k)     p[k].read()                          -> top[k].write(), bottom[k].write()
    matvec(k)   p[k].read(), bottom[k-1].read(),
                top[k+1].read()                      -> Ap[k].write(), pAp[k].write()
    alpha       pAp[*].read()                        -> scalars.rw()      (device 0)
    update(k)   scalars.read(), p[k].read(),
                Ap[k].read()                         -> x[k].rw(), r[k].rw(), rr[k].write()
    beta        rr[*].read()                         -> scalars.rw()      (device 0)
    direction(k) scalars.read(), r[k].read()         -> p[k].rw()

Nobody writes a dependency edge or a copy by hand: the halo rows of the neighbouring
blocks, the partial dot products and the scalars ``alpha`` and ``beta`` travel between
devices because the tasks say what they read and write. A ``host_launch`` reads the
scalars now and then and prints the residual (and the iteration, counted on the
device); the solution ``x`` is registered from row strips of one NumPy array, so
leaving the context writes the answer back into it.

Graph mode
----------
On a GPU the tasks of one iteration are small, and submitting them one by one from
Python costs more than the device work. With ``--graph`` the
solve records ``report_every`` iterations and their progress report once, in a
``launchable_graph_scope`` of a ``stackable_context`` (one CUDA graph spanning the
devices; on one device, one iteration in a device-side ``repeat`` loop), and launches
that graph until the iterations are done: the host submits nothing per iteration.
On CUDA the default is ``--size large --graph``: on one H200, 1000 iterations of a
512×512 grid take 0.09 s against 3.5 s for the NumPy reference (38×), where the same
solve submitted task by task takes 1.96 s (1.6×) and the medium size 0.57 s, slower
than NumPy's 0.04 s. The demo prints its speed-up over the reference.

Task bodies
-----------
Each kernel (in ``stflow._demos.core``, shared with the version over MPI ranks) is
written once against an array module ``xp`` and run with
``t.run(kernel)``: on the emulated backend it is enqueued on the task stream and runs
with NumPy on the emulated device; on CUDA it launches CuPy kernels on the task stream
(captured into the graph in graph mode).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._demos.core import (
    _TINY,
    DEFAULT_SIZE,
    SIZES,
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

__all__ = [
    "DEFAULT_SIZE",
    "SIZES",
    "SolveResult",
    "blas_threads",
    "halo_reads",
    "layout",
    "main",
    "poisson_matvec",
    "poisson_rhs",
    "reference_cg",
    "row_blocks",
    "solve",
    "time_reference",
]


@dataclass
class SolveResult:
    """What :func:`solve` did."""

    x: np.ndarray
    tasks: int
    """Tasks and host callbacks run (in graph mode: recorded once, run at every
    launch)."""
    seconds: float
    """Wall time from the first submission to the end of ``finalize()``."""
    statistics: Any = None
    """``ctx.statistics()`` after ``finalize()``: copies, bytes, waits."""
    launches: int = 0
    """Graph launches (``graph=True``; 0 in stream mode)."""


class _Submitter:
    """Submits the kernels as tasks, running them on the task stream of the backend."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.tasks = 0

    def task(
        self, device: int, kernel: Callable[..., None], *deps: Any, symbol: str
    ) -> None:
        """``kernel(xp, *arrays)`` in a task on ``device`` with dependencies ``deps``
        (``t.run``: NumPy enqueued on the emulated task stream, CuPy on CUDA)."""
        import stflow as stf

        self.tasks += 1
        with self.ctx.task(stf.exec_place.device(device), *deps, symbol=symbol) as t:
            t.run(kernel, *range(len(deps)))

    def host(
        self, fn: Callable[..., None], *deps: Any, args: tuple[Any, ...], symbol: str
    ) -> None:
        """``fn(*arrays, *args)`` on a host thread once ``deps`` are ready."""
        self.tasks += 1
        self.ctx.host_launch(*deps, fn=fn, args=args, symbol=symbol)


def solve(
    b: np.ndarray,
    iterations: int,
    *,
    backend: str = "auto",
    devices: int | None = None,
    blocks: int | None = None,
    report_every: int = 0,
    out: Callable[[str], Any] = print,
    graph: bool = False,
) -> SolveResult:
    """Solve ``A x = b`` with ``iterations`` steps of blocked CG through stflow.

    Parameters
    ----------
    b : numpy.ndarray
        The ``n × n`` right-hand side.
    iterations : int
        CG iterations (no early exit: the host never waits inside the loop).
    backend : str
        Passed to ``stflow.context(backend=...)``.
    devices : int, optional
        Spread the blocks over devices ``0 .. devices-1`` (default: all of them).
    blocks : int, optional
        Number of row strips (default ``2 * devices``, at most ``n``).
    report_every : int
        Print the relative residual from a host callback every that many iterations
        (``0``: never).
    out : callable
        Where progress lines go (from stflow's host-callback thread).
    graph : bool
        Record ``report_every`` iterations (all of them when ``report_every`` is 0)
        and their report once as a launchable graph, and launch it until the
        iterations are done; the remainder, if any, runs in stream mode. On one
        device the graph holds one iteration in a ``repeat`` loop.

    Notes
    -----
    The returned ``x`` is a fresh array that the context wrote back at
    ``finalize()``; ``b`` is registered read-only and never modified.
    """
    import stflow as stf
    from stflow.backends import get_backend

    n = b.shape[0]
    x_full = np.zeros_like(b)
    b_full = np.array(b, dtype=np.float64, order="C")
    b_full.setflags(write=False)
    started = time.perf_counter()
    opened: Any = (
        stf.stackable_context(backend=backend) if graph else stf.context(backend=backend)
    )
    launches = 0
    with opened as ctx:
        devices, blocks = layout(
            n, get_backend(ctx.backend).device_count, devices, blocks
        )
        cg = _CG(
            ctx, _Submitter(ctx), x_full, b_full, row_blocks(n, blocks), devices, out
        )
        cg.start()
        done = 0
        if graph and iterations:
            launches, done = cg.run_as_graph(iterations, report_every)
        for it in range(done + 1, iterations + 1):
            cg.iteration(
                bool(report_every) and (it % report_every == 0 or it == iterations)
            )
    seconds = time.perf_counter() - started
    return SolveResult(x_full, cg.submit.tasks, seconds, ctx.statistics(), launches)


class _CG:
    """The logical data of one blocked CG solve in ``ctx`` and the tasks of its
    steps (block ``k`` on device ``k % devices``)."""

    def __init__(
        self,
        ctx: Any,
        submit: _Submitter,
        x_full: np.ndarray,
        b_full: np.ndarray,
        strips: list[tuple[int, int]],
        devices: int,
        out: Callable[[str], Any],
    ) -> None:
        n = b_full.shape[0]
        blocks = len(strips)
        self.ctx, self.submit, self.devices, self.out = ctx, submit, devices, out
        self.blocks = blocks
        self.home = [k % devices for k in range(blocks)]

        def vector(name: str, k: int) -> Any:
            rows = strips[k][1] - strips[k][0]
            return ctx.logical_data_empty((rows, n), np.float64, name=f"{name}[{k}]")

        def scalar(name: str, k: int) -> Any:
            return ctx.logical_data_empty((1,), np.float64, name=f"{name}[{k}]")

        def row(name: str, k: int) -> Any:
            return ctx.logical_data_empty((n,), np.float64, name=f"{name}[{k}]")

        self.x = [
            ctx.logical_data(x_full[a:z], name=f"x[{k}]")
            for k, (a, z) in enumerate(strips)
        ]
        self.rhs = [
            ctx.logical_data(b_full[a:z], name=f"b[{k}]")
            for k, (a, z) in enumerate(strips)
        ]
        self.r = [vector("r", k) for k in range(blocks)]
        self.p = [vector("p", k) for k in range(blocks)]
        self.ap = [vector("Ap", k) for k in range(blocks)]
        self.top = [row("top", k) for k in range(blocks)]
        self.bottom = [row("bottom", k) for k in range(blocks)]
        self.rr = [scalar("rr", k) for k in range(blocks)]
        self.pap = [scalar("pAp", k) for k in range(blocks)]
        self.scalars = ctx.logical_data_empty((5,), np.float64, name="scalars")

    def start(self) -> None:
        """``r = p = b`` and ``r·r`` (``x`` starts at 0)."""
        submit, home = self.submit, self.home
        for k in range(self.blocks):
            submit.task(
                home[k],
                _start,
                self.rhs[k].read(),
                self.r[k].write(),
                self.p[k].write(),
                self.rr[k].write(),
                symbol=f"start[{k}]",
            )
        submit.task(
            0,
            _init_scalars,
            self.scalars.write(),
            *(part.read() for part in self.rr),
            symbol="init",
        )

    def iteration(self, report: bool) -> None:
        """One CG step; ``report``: then print the residual from a host callback."""
        submit, home, blocks, scalars = self.submit, self.home, self.blocks, self.scalars
        r, p, rr, pap = self.r, self.p, self.rr, self.pap
        for k in range(blocks):
            submit.task(
                home[k],
                _copy_edges,
                p[k].read(),
                self.top[k].write(),
                self.bottom[k].write(),
                symbol=f"halo[{k}]",
            )
        for k in range(blocks):
            submit.task(
                home[k],
                _matvec_kernel(k > 0, k < blocks - 1),
                p[k].read(),
                *halo_reads(k, self.top, self.bottom),
                self.ap[k].write(),
                pap[k].write(),
                symbol=f"matvec[{k}]",
            )
        submit.task(
            0, _alpha, scalars.rw(), *(part.read() for part in pap), symbol="alpha"
        )
        for k in range(blocks):
            submit.task(
                home[k],
                _update,
                scalars.read(),
                p[k].read(),
                self.ap[k].read(),
                self.x[k].rw(),
                r[k].rw(),
                rr[k].write(),
                symbol=f"update[{k}]",
            )
        submit.task(0, _beta, scalars.rw(), *(part.read() for part in rr), symbol="beta")
        for k in range(blocks):
            submit.task(
                home[k],
                _direction,
                scalars.read(),
                r[k].read(),
                p[k].rw(),
                symbol=f"direction[{k}]",
            )
        if report:
            submit.host(_report, scalars.read(), args=(self.out,), symbol="report")

    def run_as_graph(self, iterations: int, report_every: int) -> tuple[int, int]:
        """Record ``chunk`` iterations and the report that ends them once; launch the
        graph until fewer than ``chunk`` iterations are left. On one device the
        chunk is a device-side ``repeat`` of one recorded iteration (a CUDA loop body
        stays on one device); over several it is unrolled. Returns the launches and
        the iterations done."""
        submit = self.submit
        chunk = min(report_every or iterations, iterations)
        launches = iterations // chunk
        before = submit.tasks
        with self.ctx.launchable_graph_scope() as recorded:
            if self.devices == 1:
                with self.ctx.repeat(chunk):
                    self.iteration(False)
                submit.tasks += (submit.tasks - before) * (chunk - 1)
            else:
                for _ in range(chunk):
                    self.iteration(False)
            if report_every:
                submit.host(
                    _report, self.scalars.read(), args=(self.out,), symbol="report"
                )
            for _ in range(launches):
                recorded.launch()
        submit.tasks += (submit.tasks - before) * (launches - 1)
        return launches, launches * chunk


# -- the command line --------------------------------------------------------------


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m stflow.demo",
        description="Blocked conjugate-gradient solve of a 2-D Poisson problem, "
        "spread over the devices with stflow, checked against NumPy.",
        epilog="On the emulated backend, STFLOW_EMULATION_SEED fixes the scheduler's "
        "seed.",
    )
    parser.add_argument(
        "--size",
        default=None,
        help="small, medium, large, or the grid points per side "
        f"(default: large = {SIZES['large'][0]} on CUDA, "
        f"medium = {SIZES['medium'][0]} emulated)",
    )
    parser.add_argument(
        "--iterations",
        type=int,
        default=None,
        help="CG iterations (default: set by --size)",
    )
    parser.add_argument(
        "--backend",
        choices=("auto", "emulated", "cuda"),
        default=None,
        help="default: STFLOW_BACKEND, else auto (CUDA when usable)",
    )
    parser.add_argument(
        "--devices",
        type=int,
        default=None,
        help="devices to use (default: all); on the emulated backend, "
        "also how many virtual devices to create",
    )
    parser.add_argument(
        "--blocks", type=int, default=None, help="row strips (default: 2 per device)"
    )
    parser.add_argument(
        "--warmup",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="solve a tiny problem first, so that compiling the task "
        "kernels (CuPy on CUDA) is not part of the timing or trace "
        "(default: on CUDA)",
    )
    parser.add_argument(
        "--graph",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="record the iterations between two progress reports once "
        "as a graph and launch it (default: on CUDA); with "
        "--distributed: each rank records its tasks between two "
        "exchanges as a graph (default: off)",
    )
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="spread the blocks over MPI ranks (run it with mpiexec -n "
        "N python -m stflow.demo --distributed; needs mpi4py)",
    )
    args = parser.parse_args(argv)
    args.error = parser.error
    _size(args)
    for name in ("n", "iterations", "devices", "blocks"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{'size' if name == 'n' else name} must be positive")
    return args


def time_reference(
    b: np.ndarray, iterations: int, *, max_runs: int = 5, budget: float = 2.0
) -> tuple[np.ndarray, float, int]:
    """Run the NumPy reference CG ``max_runs`` times, or until ``budget`` seconds are
    spent (at least once); returns ``(x, best seconds, runs)``.

    Notes
    -----
    One run of a small reference swings several-fold with what else the machine does
    and with the BLAS library's threads waking up (``np.vdot``); the best of a few
    runs is the stable figure to compare with.
    """
    best, spent, runs = float("inf"), 0.0, 0
    x = b
    while runs < max(max_runs, 1) and (runs == 0 or spent < budget):
        started = time.perf_counter()
        x = reference_cg(b, iterations)
        seconds = time.perf_counter() - started
        best, spent, runs = min(best, seconds), spent + seconds, runs + 1
    return x, best, runs


def blas_threads() -> str:
    """The BLAS library NumPy calls and its threads, as far as this process can tell:
    threadpoolctl's count when it is installed, else the environment variable that
    sets it, else the library's default (one thread per core)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        pass
    else:
        pools = [pool for pool in threadpool_info() if pool.get("user_api") == "blas"]
        if pools:
            return "; ".join(
                f"BLAS {pool.get('internal_api', '?')} with "
                f"{pool.get('num_threads', '?')} thread(s)"
                for pool in pools
            )
    try:
        name = np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]
    except Exception:  # NumPy < 1.26, or an unusual build
        name = "?"
    for variable in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(variable, "").strip()
        if value:
            return f"BLAS {name} with {variable}={value}"
    return (
        f"BLAS {name} with its default threads (one per core: {os.cpu_count()}; "
        "set OPENBLAS_NUM_THREADS to choose)"
    )


def main(argv: Sequence[str] | None = None, *, configure_stflow: bool = False) -> int:
    """Run the demo; returns the process exit code (0 PASS, 1 FAIL, 2 no backend).

    Parameters
    ----------
    argv : sequence of str, optional
        The command-line arguments (default: ``sys.argv[1:]``).
    configure_stflow : bool
        Apply ``--backend`` and ``--devices`` to the process environment
        (``STFLOW_BACKEND``, ``STFLOW_EMULATED_DEVICES``) before stflow starts a
        backend, as ``python -m stflow.demo`` does. Leave it ``False`` when calling
        from a program that uses stflow itself: ``--devices`` then only limits how
        many devices of the running backend are used.
    """
    args = _parse(argv)
    if args.distributed:  # over MPI ranks: stflow/_demos/distributed.py
        from ._demos.distributed import main as main_distributed

        return main_distributed(args, configure_stflow)
    try:
        native, note = _select_backend(args, configure_stflow)
    except ImportError as exc:  # BackendUnavailableError: --backend cuda without GPU
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.n is None:
        _size(args, native.name)
    gpu = native.gpu_memory  # graph mode and a warm-up on a GPU
    graph = gpu if args.graph is None else args.graph
    warmup = gpu if args.warmup is None else args.warmup
    n, iterations = args.n, args.iterations
    print(
        f"stflow demo: blocked conjugate gradient, 2-D Poisson, {n}x{n} grid, "
        f"{iterations} iterations"
    )
    print(f"backend: {native.name} ({native.describe()})" + (f"; {note}" if note else ""))
    b = poisson_rhs(n)
    devices, blocks = layout(n, native.device_count, args.devices, args.blocks)
    print(
        f"layout: {blocks} row block(s) over {devices} device(s)"
        + (
            "; graph mode: the iterations between two reports are one graph, "
            "launched again and again"
            if graph
            else ""
        )
    )
    result = _solve_printing(b, iterations, native.name, devices, blocks, graph, warmup)
    passed = _check_and_print(b, iterations, result, native.name)
    return 0 if passed else 1


def _solve_printing(
    b: np.ndarray,
    iterations: int,
    backend: str,
    devices: int,
    blocks: int,
    graph: bool,
    warmup: bool,
) -> SolveResult:
    """The demo's solve, printing the residual every fifth of the iterations (and at
    the last); ``warmup``: after a silent solve of a tiny problem, so that compiling
    the kernels is not timed."""
    report_every = max(1, iterations // 5)
    if warmup:
        solve(
            poisson_rhs(32),
            2,
            backend=backend,
            devices=devices,
            blocks=min(blocks, 32),
            graph=graph,
            report_every=1,
            out=lambda line: None,
        )
    return solve(
        b,
        iterations,
        backend=backend,
        devices=devices,
        blocks=blocks,
        report_every=report_every,
        out=lambda line: print(line, flush=True),
        graph=graph,
    )


def _check_and_print(
    b: np.ndarray, iterations: int, result: SolveResult, backend: str
) -> bool:
    """Check ``result`` against the NumPy reference and print the verdict, the timing
    (with the reference's), the speed-up and the statistics; returns whether it
    passed."""
    expected, reference_seconds, reference_runs = time_reference(b, iterations)
    scale = max(float(np.abs(expected).max()), _TINY)
    error = float(np.abs(result.x - expected).max())
    residual = float(np.linalg.norm(b - poisson_matvec(result.x)) / np.linalg.norm(b))
    passed = bool(np.isfinite(error)) and error <= TOLERANCE * scale

    per_task = result.seconds / max(result.tasks, 1) * 1e6
    print(f"result: |b - A x| / |b| = {residual:.3e}, max |x| = {scale:.6g}")
    print(
        f"check against the sequential NumPy CG: max error {error:.3e} "
        f"(tolerance {TOLERANCE * scale:.1e}) -> {'PASS' if passed else 'FAIL'}"
    )
    launched = f" from {result.launches} graph launches" if result.launches else ""
    import stflow

    build = "compiled build" if stflow.__compiled__ else "Python sources"
    print(
        f"timing: {result.seconds:.3f} s wall for {result.tasks} tasks{launched} "
        f"({per_task:.1f} us per task, {build}); NumPy reference "
        f"{reference_seconds:.3f} s "
        f"(best of {reference_runs} run{'s' if reference_runs > 1 else ''}; "
        f"{blas_threads()})"
    )
    speedup = reference_seconds / max(result.seconds, 1e-9)
    print(
        f"speed-up over NumPy: {speedup:.2f}x (NumPy reference time / solve time"
        + (
            "; the emulated backend checks correctness, it is not meant to be fast)"
            if backend == "emulated"
            else ")"
        )
    )
    print(f"statistics: {result.statistics}")
    return passed


if __name__ == "__main__":
    sys.exit(main(configure_stflow=True))
