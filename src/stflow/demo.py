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
Each kernel below is written once against an array module ``xp`` and run with
``t.run(kernel)``: on the emulated backend it is enqueued on the task stream and runs
with NumPy on the emulated device; on CUDA it launches CuPy kernels on the task stream
(captured into the graph in graph mode).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["DEFAULT_SIZE", "SIZES", "SolveResult", "halo_reads", "layout", "main",
           "poisson_matvec", "poisson_rhs",
           "reference_cg", "row_blocks", "solve"]

SIZES = {"small": (32, 60), "medium": (128, 250), "large": (512, 1000)}
"""``--size`` presets: grid points per side and CG iterations."""

DEFAULT_SIZE = {"emulated": "medium", "cuda": "large"}
"""The ``--size`` preset of each backend: on CUDA, with graph mode (the default there),
a size where the GPU beats the NumPy reference clearly."""

TOLERANCE = 1e-9
"""Largest accepted ``max |x - x_ref| / max |x_ref|``."""

_TINY = 1e-300   # keeps alpha and beta finite once the residual is exactly zero


# -- the problem and its NumPy reference -------------------------------------------

def poisson_rhs(n: int) -> np.ndarray:
    """The right-hand side ``b = h² · f`` with ``f = 1`` on an ``n × n`` grid."""
    h = 1.0 / (n + 1)
    return np.full((n, n), h * h)


def poisson_matvec(u: np.ndarray) -> np.ndarray:
    """``A u`` for the 5-point Laplacian with zero Dirichlet boundary (NumPy)."""
    out = 4.0 * u
    out[1:, :] -= u[:-1, :]
    out[:-1, :] -= u[1:, :]
    out[:, 1:] -= u[:, :-1]
    out[:, :-1] -= u[:, 1:]
    return out


def reference_cg(b: np.ndarray, iterations: int) -> np.ndarray:
    """Plain sequential CG on the whole grid, starting from ``x = 0``."""
    x = np.zeros_like(b)
    r = b.copy()
    p = r.copy()
    rr = float(np.vdot(r, r))
    for _ in range(iterations):
        ap = poisson_matvec(p)
        alpha = rr / max(float(np.vdot(p, ap)), _TINY)
        x += alpha * p
        r -= alpha * ap
        rr_new = float(np.vdot(r, r))
        beta = rr_new / max(rr, _TINY)
        rr = rr_new
        p *= beta
        p += r
    return x


def layout(n: int, available: int, devices: int | None = None,
           blocks: int | None = None) -> tuple[int, int]:
    """``(devices, blocks)`` actually used for an ``n``-row grid.

    ``devices`` defaults to all ``available`` ones, ``blocks`` to two per device; there
    are at most ``n`` blocks and no more devices than blocks.
    """
    devices = available if devices is None else min(devices, available)
    blocks = min(2 * devices if blocks is None else blocks, n)
    return min(devices, blocks), blocks


def row_blocks(n: int, blocks: int) -> list[tuple[int, int]]:
    """Split ``n`` rows into ``blocks`` contiguous ``(start, stop)`` strips."""
    bounds = np.linspace(0, n, blocks + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


# -- kernels: written once, run with NumPy (emulated) or CuPy (CUDA) -----------------

def _copy_edges(xp: Any, p: Any, top: Any, bottom: Any) -> None:
    top[...] = p[0]
    bottom[...] = p[-1]


def _matvec_kernel(has_above: bool, has_below: bool) -> Callable[..., None]:
    def kernel(xp: Any, p: Any, *rest: Any) -> None:
        halos = list(rest[:has_above + has_below])
        ap, pap = rest[has_above + has_below:]
        ap[...] = 4.0 * p
        ap[1:, :] -= p[:-1, :]
        ap[:-1, :] -= p[1:, :]
        ap[:, 1:] -= p[:, :-1]
        ap[:, :-1] -= p[:, 1:]
        if has_above:
            ap[0, :] -= halos.pop(0)
        if has_below:
            ap[-1, :] -= halos.pop(0)
        pap[0] = xp.dot(p.ravel(), ap.ravel())
    return kernel


def _sum_parts(parts: Sequence[Any]) -> Any:
    total = parts[0][0]
    for part in parts[1:]:
        total = total + part[0]
    return total


def _init_scalars(xp: Any, scalars: Any, *rr_parts: Any) -> None:
    rr = _sum_parts(rr_parts)
    scalars[0] = rr          # r·r
    scalars[1] = 0.0         # alpha
    scalars[2] = 0.0         # beta
    scalars[3] = rr          # r·r at the start, for the relative residual
    scalars[4] = 0.0         # iterations done (a graph replays frozen Python values)


def _alpha(xp: Any, scalars: Any, *pap_parts: Any) -> None:
    scalars[1] = scalars[0] / xp.maximum(_sum_parts(pap_parts), _TINY)


def _update(xp: Any, scalars: Any, p: Any, ap: Any, x: Any, r: Any, rr: Any) -> None:
    alpha = scalars[1]
    x += alpha * p
    r -= alpha * ap
    rr[0] = xp.dot(r.ravel(), r.ravel())


def _beta(xp: Any, scalars: Any, *rr_parts: Any) -> None:
    rr_new = _sum_parts(rr_parts)
    scalars[2] = rr_new / xp.maximum(scalars[0], _TINY)
    scalars[0] = rr_new
    scalars[4] += 1.0


def _direction(xp: Any, scalars: Any, r: Any, p: Any) -> None:
    p *= scalars[2]
    p += r


def _start(xp: Any, b: Any, r: Any, p: Any, rr: Any) -> None:
    r[...] = b
    p[...] = b
    rr[0] = xp.dot(b.ravel(), b.ravel())


# -- the solver --------------------------------------------------------------------

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

    def task(self, device: int, kernel: Callable[..., None], *deps: Any,
             symbol: str) -> None:
        """``kernel(xp, *arrays)`` in a task on ``device`` with dependencies ``deps``
        (``t.run``: NumPy enqueued on the emulated task stream, CuPy on CUDA)."""
        import stflow as stf
        self.tasks += 1
        with self.ctx.task(stf.exec_place.device(device), *deps, symbol=symbol) as t:
            t.run(kernel, *range(len(deps)))

    def host(self, fn: Callable[..., None], *deps: Any, args: tuple[Any, ...],
             symbol: str) -> None:
        """``fn(*arrays, *args)`` on a host thread once ``deps`` are ready."""
        self.tasks += 1
        self.ctx.host_launch(*deps, fn=fn, args=args, symbol=symbol)


def solve(b: np.ndarray, iterations: int, *, backend: str = "auto",
          devices: int | None = None, blocks: int | None = None,
          report_every: int = 0, out: Callable[[str], Any] = print,
          graph: bool = False) -> SolveResult:
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
    opened: Any = stf.stackable_context(backend=backend) if graph else \
        stf.context(backend=backend)
    launches = 0
    with opened as ctx:
        devices, blocks = layout(n, get_backend(ctx.backend).device_count, devices,
                                 blocks)
        strips = row_blocks(n, blocks)
        home = [k % devices for k in range(blocks)]
        submit = _Submitter(ctx)

        def vector(name: str, k: int) -> Any:
            rows = strips[k][1] - strips[k][0]
            return ctx.logical_data_empty((rows, n), np.float64, name=f"{name}[{k}]")

        def scalar(name: str, k: int) -> Any:
            return ctx.logical_data_empty((1,), np.float64, name=f"{name}[{k}]")

        def row(name: str, k: int) -> Any:
            return ctx.logical_data_empty((n,), np.float64, name=f"{name}[{k}]")

        x = [ctx.logical_data(x_full[a:z], name=f"x[{k}]")
             for k, (a, z) in enumerate(strips)]
        rhs = [ctx.logical_data(b_full[a:z], name=f"b[{k}]")
               for k, (a, z) in enumerate(strips)]
        r = [vector("r", k) for k in range(blocks)]
        p = [vector("p", k) for k in range(blocks)]
        ap = [vector("Ap", k) for k in range(blocks)]
        top = [row("top", k) for k in range(blocks)]
        bottom = [row("bottom", k) for k in range(blocks)]
        rr = [scalar("rr", k) for k in range(blocks)]
        pap = [scalar("pAp", k) for k in range(blocks)]
        scalars = ctx.logical_data_empty((5,), np.float64, name="scalars")

        for k in range(blocks):
            submit.task(home[k], _start, rhs[k].read(), r[k].write(), p[k].write(),
                        rr[k].write(), symbol=f"start[{k}]")
        submit.task(0, _init_scalars, scalars.write(), *(part.read() for part in rr),
                    symbol="init")

        def iteration(report: bool) -> None:
            for k in range(blocks):
                submit.task(home[k], _copy_edges, p[k].read(), top[k].write(),
                            bottom[k].write(), symbol=f"halo[{k}]")
            for k in range(blocks):
                submit.task(home[k], _matvec_kernel(k > 0, k < blocks - 1),
                            p[k].read(), *halo_reads(k, top, bottom), ap[k].write(),
                            pap[k].write(), symbol=f"matvec[{k}]")
            submit.task(0, _alpha, scalars.rw(), *(part.read() for part in pap),
                        symbol="alpha")
            for k in range(blocks):
                submit.task(home[k], _update, scalars.read(), p[k].read(),
                            ap[k].read(), x[k].rw(), r[k].rw(), rr[k].write(),
                            symbol=f"update[{k}]")
            submit.task(0, _beta, scalars.rw(), *(part.read() for part in rr),
                        symbol="beta")
            for k in range(blocks):
                submit.task(home[k], _direction, scalars.read(), r[k].read(),
                            p[k].rw(), symbol=f"direction[{k}]")
            if report:
                submit.host(_report, scalars.read(), args=(out,), symbol="report")

        done = 0
        if graph and iterations:
            # Record `chunk` iterations and the report that ends them once; launch
            # the graph until fewer than `chunk` iterations are left. On one device
            # the chunk is a device-side `repeat` of one recorded iteration (a CUDA
            # loop body stays on one device); over several it is unrolled.
            chunk = min(report_every or iterations, iterations)
            launches = iterations // chunk
            before = submit.tasks
            with ctx.launchable_graph_scope() as recorded:
                if devices == 1:
                    with ctx.repeat(chunk):
                        iteration(False)
                    submit.tasks += (submit.tasks - before) * (chunk - 1)
                else:
                    for _ in range(chunk):
                        iteration(False)
                if report_every:
                    submit.host(_report, scalars.read(), args=(out,), symbol="report")
                for _ in range(launches):
                    recorded.launch()
            submit.tasks += (submit.tasks - before) * (launches - 1)
            done = launches * chunk
        for it in range(done + 1, iterations + 1):
            iteration(bool(report_every)
                      and (it % report_every == 0 or it == iterations))
    seconds = time.perf_counter() - started
    return SolveResult(x_full, submit.tasks, seconds, ctx.statistics(), launches)


def halo_reads(k: int, top: Sequence[Any], bottom: Sequence[Any]) -> list[Any]:
    """The reads of block ``k``'s halo rows: the last row of the block above
    (``bottom[k - 1]``) and the first row of the block below (``top[k + 1]``)."""
    halos = []
    if k > 0:
        halos.append(bottom[k - 1].read())
    if k < len(top) - 1:
        halos.append(top[k + 1].read())
    return halos


def _report(scalars: np.ndarray, out: Callable[[str], Any]) -> None:
    relative = np.sqrt(scalars[0] / max(scalars[3], _TINY))
    out(f"  iteration {int(round(scalars[4])):4d}: |r|/|r0| = {relative:.3e}")


# -- the command line --------------------------------------------------------------

def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m stflow.demo",
        description="Blocked conjugate-gradient solve of a 2-D Poisson problem, "
                    "spread over the devices with stflow, checked against NumPy.",
        epilog="On the emulated backend, STFLOW_EMULATION_SEED fixes the scheduler's "
               "seed.")
    parser.add_argument("--size", default=None,
                        help="small, medium, large, or the grid points per side "
                             "(default: large = %d on CUDA, medium = %d emulated)"
                             % (SIZES["large"][0], SIZES["medium"][0]))
    parser.add_argument("--iterations", type=int, default=None,
                        help="CG iterations (default: set by --size)")
    parser.add_argument("--backend", choices=("auto", "emulated", "cuda"),
                        default=None,
                        help="default: STFLOW_BACKEND, else auto (CUDA when usable)")
    parser.add_argument("--devices", type=int, default=None,
                        help="devices to use (default: all); on the emulated backend, "
                             "also how many virtual devices to create")
    parser.add_argument("--blocks", type=int, default=None,
                        help="row strips (default: 2 per device)")
    parser.add_argument("--warmup", action=argparse.BooleanOptionalAction,
                        default=None,
                        help="solve a tiny problem first, so that compiling the task "
                             "kernels (CuPy on CUDA) is not part of the timing or trace "
                             "(default: on CUDA)")
    parser.add_argument("--graph", action=argparse.BooleanOptionalAction, default=None,
                        help="record the iterations between two progress reports once "
                             "as a graph and launch it (default: on CUDA)")
    parser.add_argument("--distributed", action="store_true",
                        help="spread the blocks over MPI ranks (run it with mpiexec -n "
                             "N python -m stflow.demo --distributed; needs mpi4py)")
    args = parser.parse_args(argv)
    args.error = parser.error
    _size(args)
    for name in ("n", "iterations", "devices", "blocks"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{'size' if name == 'n' else name} must be positive")
    return args


def _size(args: argparse.Namespace, backend: str | None = None) -> None:
    """``args.n`` and the default ``args.iterations`` from ``--size`` (whose default
    depends on the backend: left undecided until ``backend`` is known)."""
    args.n = None
    if args.size is None:
        if backend is None:
            return
        args.size = DEFAULT_SIZE.get(backend, "medium")
    if args.size in SIZES:
        args.n, default_iterations = SIZES[args.size]
    else:
        try:
            args.n = int(args.size)
        except ValueError:
            args.error(f"--size must be one of {', '.join(SIZES)} or an integer, "
                       f"got {args.size!r}")
        default_iterations = SIZES["medium"][1]
    if args.iterations is None:
        args.iterations = default_iterations


def _configure(args: argparse.Namespace) -> str:
    """Apply ``--backend`` and ``--devices`` through stflow's environment variables.

    stflow reads ``STFLOW_BACKEND`` and ``STFLOW_EMULATED_DEVICES`` once, when the first
    backend starts; place factories validate device ordinals against that default
    backend. So the options are written there, if no backend has started yet (always
    the case under ``python -m stflow.demo``). Returns a note when they could not be
    applied.
    """
    from stflow import _config, backends
    from stflow.backends import emulated
    wanted = {}
    if args.backend is not None:
        wanted["STFLOW_BACKEND"] = args.backend
    if args.devices is not None and args.backend != "cuda":
        wanted["STFLOW_EMULATED_DEVICES"] = str(args.devices)
    wanted = {key: value for key, value in wanted.items() if os.environ.get(key) != value}
    if not wanted:
        return ""
    if emulated._backend is None and backends._auto is None:
        # Keep the scheduler seed already drawn (and maybe reported) for this process.
        wanted.setdefault("STFLOW_EMULATION_SEED", str(_config.config().emulation_seed))
        os.environ.update(wanted)
        _config.reload()
        return ""
    running = emulated._backend
    if "STFLOW_EMULATED_DEVICES" in wanted and running is not None \
            and running.device_count < args.devices:
        return (f"the emulated backend was already started with "
                f"{running.device_count} device(s)")
    return ""


def _select_backend(args: argparse.Namespace, configure: bool) -> tuple[Any, str]:
    """The backend to run on, and a note on how it was chosen."""
    from stflow import _config
    from stflow.backends import default_backend, get_backend
    from stflow.errors import BackendNotice, BackendUnavailableError
    requested = args.backend or _config.config().backend
    note = ""
    if requested == "auto" and importlib.util.find_spec("cupy") is None:
        # The CUDA task bodies need CuPy: without it, only emulation can run them.
        args.backend = requested = "emulated"
        note = "auto-selected: CuPy (used by the CUDA task bodies) is not installed"
    elif requested == "cuda" and importlib.util.find_spec("cupy") is None:
        raise BackendUnavailableError(
            "the demo's CUDA task bodies use CuPy; install it (pip install "
            "cupy-cuda12x or cupy-cuda13x) or pass --backend emulated")
    if configure:
        note = _configure(args) or note
    with warnings.catch_warnings():
        # Said in one line by main() instead of the one-time BackendNotice.
        warnings.simplefilter("ignore", BackendNotice)
        native = get_backend(requested)
        try:
            default_backend()   # place factories check device ordinals against it
        except ImportError:
            pass
    if requested == "auto" and native.name == "emulated":
        note = note or "auto-selected: no usable CUDA GPU"
    return native, note


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
    if args.distributed:                 # over MPI ranks: stflow/_demo_distributed.py
        from ._demo_distributed import main as main_distributed
        return main_distributed(args, configure_stflow)
    try:
        native, note = _select_backend(args, configure_stflow)
    except ImportError as exc:   # BackendUnavailableError: --backend cuda without GPU
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.n is None:
        _size(args, native.name)
    cuda = native.name == "cuda"
    graph = cuda if args.graph is None else args.graph
    warmup = cuda if args.warmup is None else args.warmup
    n, iterations = args.n, args.iterations
    print(f"stflow demo: blocked conjugate gradient, 2-D Poisson, {n}x{n} grid, "
          f"{iterations} iterations")
    print(f"backend: {native.name} ({native.describe()})" + (f"; {note}" if note else ""))
    b = poisson_rhs(n)
    devices, blocks = layout(n, native.device_count, args.devices, args.blocks)
    print(f"layout: {blocks} row block(s) over {devices} device(s)"
          + ("; graph mode: the iterations between two reports are one graph, "
             "launched again and again" if graph else ""))

    report_every = max(1, iterations // 5)
    if warmup:
        solve(poisson_rhs(32), 2, backend=native.name, devices=devices,
              blocks=min(blocks, 32), graph=graph, report_every=1,
              out=lambda line: None)
    result = solve(b, iterations, backend=native.name, devices=devices, blocks=blocks,
                   report_every=report_every, out=lambda line: print(line, flush=True),
                   graph=graph)

    started = time.perf_counter()
    expected = reference_cg(b, iterations)
    reference_seconds = time.perf_counter() - started
    scale = max(float(np.abs(expected).max()), _TINY)
    error = float(np.abs(result.x - expected).max())
    residual = float(np.linalg.norm(b - poisson_matvec(result.x)) / np.linalg.norm(b))
    passed = bool(np.isfinite(error)) and error <= TOLERANCE * scale

    per_task = result.seconds / max(result.tasks, 1) * 1e6
    print(f"result: |b - A x| / |b| = {residual:.3e}, max |x| = {scale:.6g}")
    print(f"check against the sequential NumPy CG: max error {error:.3e} "
          f"(tolerance {TOLERANCE * scale:.1e}) -> {'PASS' if passed else 'FAIL'}")
    launched = f" from {result.launches} graph launches" if result.launches else ""
    print(f"timing: {result.seconds:.3f} s wall for {result.tasks} tasks{launched} "
          f"({per_task:.1f} us per task); NumPy reference {reference_seconds:.3f} s")
    speedup = reference_seconds / max(result.seconds, 1e-9)
    verdict = "faster" if speedup >= 1 else "slower"
    print(f"speed-up over NumPy: {speedup:.2f}x ({native.name} is {verdict}"
          + ("; the emulated backend checks correctness, it is not meant to be fast)"
             if native.name == "emulated" else ")"))
    print(f"statistics: {result.statistics}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(configure_stflow=True))
