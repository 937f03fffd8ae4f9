"""Jacobi iteration for the 2-D Laplace equation, with interchangeable task bodies.

    python examples/jacobi.py [--m 64] [--n 64] [--tol 1e-3] [--max-iterations 400]
                              [--body xp|numba|torch|warp|all]
                              [--backend auto|cuda|emulated]

The algorithm
-------------
``u`` is an ``m × n`` grid whose first row is held at 1 and whose other edges are held
at 0. A Jacobi sweep replaces every interior point by the mean of its four neighbours::

    u_new[i, j] = 0.25 * (u[i-1, j] + u[i+1, j] + u[i, j-1] + u[i, j+1])

and the sweeps go on until the largest change of one sweep, ``max |u_new - u|``, is
at most ``--tol`` (or ``--max-iterations`` sweeps were made). The answer, and the
number of sweeps, are checked against the same iteration in NumPy.

What it shows
-------------
- A **device-side loop**: the sweeps run in a ``while_loop`` of a
  ``stackable_context``. The residual and the sweep counter are one-element logical
  data written by the tasks, and ``loop.continue_while((residual > tol) & (it <
  max_iterations))`` is evaluated on the device, so the host records the loop body
  once and never waits for a residual.
- **One algorithm, four kinds of body.** Each sweep is two tasks, ``sweep`` (reads
  ``A``, writes ``Anew`` and ``residual``) and ``commit`` (copies ``Anew`` back into
  ``A``, counts the sweep); ``--body`` picks who writes their bodies:

  ``xp``     ``t.run(fn, ...)``: ``fn(xp, *arrays)`` with NumPy (emulated backend)
             or CuPy (CUDA), the idiom of every other example;
  ``numba``  ``numba.cuda.jit`` kernels through ``stflow.interop.numba``
             (``numba_task``); on the emulated backend Numba's CUDA simulator
             (``NUMBA_ENABLE_CUDASIM=1``, set by this script when Numba is not yet
             imported);
  ``torch``  PyTorch tensor operations through ``stflow.interop.pytorch``
             (``pytorch_task``);
  ``warp``   ``warp.kernel`` kernels through ``stflow.interop.warp`` (``warp_task``).

  A body whose library is not installed is skipped with a message.
- **Warm-up outside the loop.** The first sweep runs in stream mode, before the
  ``while_loop``: libraries compile kernels (CuPy, Numba, Warp) and fill their memory
  pools (PyTorch) on first use, which must not happen while a loop body is captured
  into a CUDA graph.

The interop adapters run a body *at once*, in the task (on CUDA they enqueue kernels
on the task stream). A loop body is recorded into a graph, so on the emulated backend,
where an immediate body would run on the host at recording time, the library bodies
are enqueued with ``stflow.emulated.launch`` on the task stream instead, with the
library's CPU arrays over the task's memory (CPU tensors, Numba simulator arrays, Warp
CPU arrays). The ``xp`` body needs no such care: ``t.run`` does the right thing on
both backends.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

import stflow as stf

BODIES = ("xp", "numba", "torch", "warp")
_LIBRARIES = {
    "numba": ("numba", "numba-cuda (pip install numba-cuda)"),
    "torch": ("torch", "PyTorch (pip install torch)"),
    "warp": ("warp", "NVIDIA Warp (pip install warp-lang)"),
}


# -- the problem and its NumPy reference ---------------------------------------------


def initial(m: int, n: int) -> np.ndarray:
    """The start grid: first row 1 (the hot edge), everything else 0."""
    u = np.zeros((m, n))
    u[0, :] = 1.0
    return u


def reference(
    m: int, n: int, tol: float, max_iterations: int
) -> tuple[np.ndarray, int, float]:
    """The same iteration in NumPy: ``(u, sweeps, last residual)``."""
    a = initial(m, n)
    anew = a.copy()
    sweeps, residual = 0, np.inf
    while True:
        anew[1:-1, 1:-1] = 0.25 * (
            a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:]
        )
        residual = float(np.max(np.abs(anew[1:-1, 1:-1] - a[1:-1, 1:-1])))
        a[1:-1, 1:-1] = anew[1:-1, 1:-1]
        sweeps += 1
        if sweeps < 2:  # the warm-up sweep, then the loop's first
            continue
        if not (residual > tol and sweeps < max_iterations):
            return a, sweeps, residual


def available(body: str) -> str:
    """``""`` when ``body`` can run here, else why not."""
    if body == "xp":
        return ""
    module, what = _LIBRARIES[body]
    if importlib.util.find_spec(module) is None:
        return f"--body {body} needs {what}, which is not installed"
    return ""


# -- the xp body: t.run(fn, ...) -------------------------------------------------------


def _sweep_xp(xp: Any, a: Any, anew: Any, residual: Any) -> None:
    anew[1:-1, 1:-1] = 0.25 * (a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:])
    residual[0] = xp.max(xp.abs(anew[1:-1, 1:-1] - a[1:-1, 1:-1]))


def _commit_xp(xp: Any, a: Any, anew: Any, it: Any) -> None:
    a[1:-1, 1:-1] = anew[1:-1, 1:-1]
    it += 1


class _XpBody:
    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx

    def sweep(self, a: Any, anew: Any, residual: Any) -> None:
        with self.ctx.task(a.read(), anew.rw(), residual.write(), symbol="sweep") as t:
            t.run(_sweep_xp)

    def commit(self, a: Any, anew: Any, it: Any) -> None:
        with self.ctx.task(a.rw(), anew.read(), it.rw(), symbol="commit") as t:
            t.run(_commit_xp)


# -- library bodies ----------------------------------------------------------------------


class _LibraryBody:
    """A body written with a library: ``native(task scope)`` on CUDA, enqueued with
    ``stflow.emulated.launch`` over CPU arrays on the emulated backend."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.cuda = ctx.backend == "cuda"

    # Subclasses: the adapter's task scope (CUDA), a CPU array of a NumPy array
    # (emulated), and the two bodies on library arrays.
    def scope(self, deps: tuple[Any, ...], symbol: str) -> Any:
        raise NotImplementedError

    def host_array(self, array: np.ndarray) -> Any:
        raise NotImplementedError

    def enter(self, entered: Any) -> tuple[Any, ...]:
        return tuple(entered)

    def task(self, deps: tuple[Any, ...], body: Callable[..., None], symbol: str) -> None:
        if self.cuda:
            with self.scope(deps, symbol) as entered:
                body(*self.enter(entered))
            return
        from stflow.emulated import launch

        def enqueued(*arrays: np.ndarray) -> None:
            body(*[self.host_array(array) for array in arrays])

        with self.ctx.task(*deps, symbol=symbol) as t:
            launch(t.stream_ptr(), enqueued, *t.views())

    def sweep(self, a: Any, anew: Any, residual: Any) -> None:
        self.task((a.read(), anew.rw(), residual.write()), self.sweep_body, "sweep")

    def commit(self, a: Any, anew: Any, it: Any) -> None:
        self.task((a.rw(), anew.read(), it.rw()), self.commit_body, "commit")

    def sweep_body(self, *arrays: Any) -> None:
        raise NotImplementedError

    def commit_body(self, *arrays: Any) -> None:
        raise NotImplementedError


class _TorchBody(_LibraryBody):
    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        import torch

        self.torch = torch

    def scope(self, deps: tuple[Any, ...], symbol: str) -> Any:
        from stflow.interop.pytorch import pytorch_task

        return pytorch_task(self.ctx, *deps, symbol=symbol)

    def host_array(self, array: np.ndarray) -> Any:
        with warnings.catch_warnings():  # read() dependencies are read-only arrays
            warnings.simplefilter("ignore", UserWarning)
            return self.torch.from_numpy(array)

    def sweep_body(self, a: Any, anew: Any, residual: Any) -> None:
        torch = self.torch
        anew[1:-1, 1:-1] = 0.25 * (
            a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:]
        )
        residual[0] = torch.max(torch.abs(anew[1:-1, 1:-1] - a[1:-1, 1:-1]))

    def commit_body(self, a: Any, anew: Any, it: Any) -> None:
        a[1:-1, 1:-1] = anew[1:-1, 1:-1]
        it.add_(1)


# Numba kernels read ``cuda`` as a module global (bound by _numba_kernels): the CUDA
# simulator swaps its fake ``cuda`` module into a kernel's globals, not its closure.
cuda: Any = None


def _numba_clear(residual):  # type: ignore[no-untyped-def]
    residual[0] = 0.0


def _numba_sweep(a, anew, residual):  # type: ignore[no-untyped-def]
    i, j = cuda.grid(2)
    if 1 <= i < a.shape[0] - 1 and 1 <= j < a.shape[1] - 1:
        value = 0.25 * (a[i - 1, j] + a[i + 1, j] + a[i, j - 1] + a[i, j + 1])
        anew[i, j] = value
        cuda.atomic.max(residual, 0, abs(value - a[i, j]))


def _numba_commit(a, anew, it):  # type: ignore[no-untyped-def]
    i, j = cuda.grid(2)
    if 1 <= i < a.shape[0] - 1 and 1 <= j < a.shape[1] - 1:
        a[i, j] = anew[i, j]
    if i == 0 and j == 0:
        it[0] += 1


def _numba_kernels() -> dict[str, Any]:
    global cuda
    from numba import cuda

    return {
        "clear": cuda.jit(_numba_clear),
        "sweep": cuda.jit(_numba_sweep),
        "commit": cuda.jit(_numba_commit),
    }


class _NumbaBody(_LibraryBody):
    BLOCK = (16, 16)

    def __init__(self, ctx: Any, shape: tuple[int, int]) -> None:
        super().__init__(ctx)
        self.kernels = _numba_kernels()
        self.grid = tuple((size + b - 1) // b for size, b in zip(shape, self.BLOCK))
        self.stream: Any = 0

    def scope(self, deps: tuple[Any, ...], symbol: str) -> Any:
        from stflow.interop.numba import numba_task

        return numba_task(self.ctx, *deps, symbol=symbol)

    def enter(self, entered: Any) -> tuple[Any, ...]:
        from numba import cuda

        arrays, stream = entered
        self.stream = cuda.external_stream(int(stream))  # launches go to the task stream
        return tuple(arrays)

    def host_array(self, array: np.ndarray) -> Any:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        self.stream = 0  # the simulator has no streams
        return FakeCUDAArray(array)

    def sweep_body(self, a: Any, anew: Any, residual: Any) -> None:
        k = self.kernels
        k["clear"][1, 1, self.stream](residual)
        k["sweep"][self.grid, self.BLOCK, self.stream](a, anew, residual)

    def commit_body(self, a: Any, anew: Any, it: Any) -> None:
        self.kernels["commit"][self.grid, self.BLOCK, self.stream](a, anew, it)


def _warp_kernels(wp: Any) -> dict[str, Any]:
    grid2d = wp.array2d(dtype=wp.float64)
    vector = wp.array(dtype=wp.float64)
    counter = wp.array(dtype=wp.int64)

    def clear(residual):  # type: ignore[no-untyped-def]
        residual[0] = wp.float64(0.0)

    def sweep(a, anew, residual):  # type: ignore[no-untyped-def]
        i, j = wp.tid()
        if i >= 1 and i < a.shape[0] - 1 and j >= 1 and j < a.shape[1] - 1:
            value = wp.float64(0.25) * (
                a[i - 1, j] + a[i + 1, j] + a[i, j - 1] + a[i, j + 1]
            )
            anew[i, j] = value
            wp.atomic_max(residual, 0, wp.abs(value - a[i, j]))

    def commit(a, anew, it):  # type: ignore[no-untyped-def]
        i, j = wp.tid()
        if i >= 1 and i < a.shape[0] - 1 and j >= 1 and j < a.shape[1] - 1:
            a[i, j] = anew[i, j]
        if i == 0 and j == 0:
            it[0] = it[0] + wp.int64(1)

    # Warp reads the argument types from the annotations; they are set here because
    # this module's annotations are strings (``from __future__ import annotations``).
    clear.__annotations__ = {"residual": vector}
    sweep.__annotations__ = {"a": grid2d, "anew": grid2d, "residual": vector}
    commit.__annotations__ = {"a": grid2d, "anew": grid2d, "it": counter}
    return {
        name: wp.kernel(fn, module="stflow_jacobi_example")
        for name, fn in (("clear", clear), ("sweep", sweep), ("commit", commit))
    }


class _WarpBody(_LibraryBody):
    def __init__(self, ctx: Any, shape: tuple[int, int]) -> None:
        super().__init__(ctx)
        import warp as wp

        if hasattr(wp, "LOG_WARNING"):  # no start-up banner
            wp.config.log_level = wp.LOG_WARNING
        else:
            wp.config.quiet = True
        wp.init()
        self.wp = wp
        self.shape = shape
        self.kernels = _warp_kernels(wp)
        self.device: Any = "cpu"

    def scope(self, deps: tuple[Any, ...], symbol: str) -> Any:
        from stflow.interop.warp import warp_task

        return warp_task(self.ctx, *deps, symbol=symbol)

    def enter(self, entered: Any) -> tuple[Any, ...]:
        self.device = entered[0].device
        return tuple(entered)

    def host_array(self, array: np.ndarray) -> Any:
        self.device = "cpu"
        return self.wp.array(
            ptr=array.ctypes.data,
            dtype=self.wp.dtype_from_numpy(array.dtype),
            shape=array.shape,
            device="cpu",
        )

    def _launch(self, name: str, dim: Any, *arrays: Any) -> None:
        self.wp.launch(
            self.kernels[name], dim=dim, inputs=list(arrays), device=self.device
        )

    def sweep_body(self, a: Any, anew: Any, residual: Any) -> None:
        self._launch("clear", 1, residual)
        self._launch("sweep", self.shape, a, anew, residual)

    def commit_body(self, a: Any, anew: Any, it: Any) -> None:
        self._launch("commit", self.shape, a, anew, it)


def _make_body(body: str, ctx: Any, shape: tuple[int, int]) -> Any:
    if body == "xp":
        return _XpBody(ctx)
    if body == "torch":
        return _TorchBody(ctx)
    if body == "numba":
        return _NumbaBody(ctx, shape)
    if body == "warp":
        return _WarpBody(ctx, shape)
    raise ValueError(f"unknown body {body!r}; choose from {', '.join(BODIES)}")


def prepare_numba(backend: str | None) -> str:
    """Turn Numba's CUDA simulator on for the emulated backend if Numba is not yet
    imported; ``""`` when the Numba body can run, else why not."""
    from stflow.backends import default_backend, get_backend

    native = default_backend() if backend is None else get_backend(backend)
    emulated = native.name == "emulated"
    if emulated and "numba" not in sys.modules:
        os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
    if not emulated:
        return ""
    from numba.core import config

    if not config.ENABLE_CUDASIM:
        return (
            "--body numba on the emulated backend needs Numba's CUDA simulator: "
            "run with NUMBA_ENABLE_CUDASIM=1"
        )
    return ""


# Numba's CUDA simulator runs every GPU thread as Python code: measured on a 2-core
# machine, about a millisecond per grid point and sweep.
SIMULATOR_SECONDS_PER_POINT_SWEEP = 1e-3
SIMULATOR_BUDGET_SECONDS = 60.0


def simulator_estimate(m: int, n: int, sweeps: int) -> float:
    """Rough seconds the Numba body takes on Numba's CUDA simulator; 0 when Numba
    runs on a GPU (or is not imported yet)."""
    numba_config = sys.modules.get("numba.core.config")
    if numba_config is None or not getattr(numba_config, "ENABLE_CUDASIM", False):
        return 0.0
    return m * n * sweeps * SIMULATOR_SECONDS_PER_POINT_SWEEP


# -- the solver ---------------------------------------------------------------------------


def solve(
    m: int,
    n: int,
    tol: float,
    max_iterations: int,
    body: str = "xp",
    backend: str | None = None,
) -> tuple[np.ndarray, int, float]:
    """Jacobi sweeps of the ``m × n`` grid until the residual is at most ``tol`` (at
    least two sweeps: the warm-up and one of the loop); returns ``(u, sweeps, last
    residual)``."""
    if m < 3 or n < 3:
        raise ValueError("the grid needs at least 3 x 3 points")
    a_host = initial(m, n)
    it_host = np.zeros(1, dtype=np.int64)
    residual_host = np.zeros(1)
    with stf.stackable_context(backend=backend) as sctx:
        runner = _make_body(body, sctx, (m, n))
        a = sctx.logical_data(a_host, name="A")
        anew = sctx.logical_data(a_host.copy(), name="Anew")  # same fixed edges
        it = sctx.logical_data(it_host, name="it")
        residual = sctx.logical_data(residual_host, name="residual")
        runner.sweep(a, anew, residual)  # warm-up, in stream mode
        runner.commit(a, anew, it)
        with sctx.while_loop() as loop:
            runner.sweep(a, anew, residual)
            runner.commit(a, anew, it)
            loop.continue_while((residual > tol) & (it < max_iterations))
    return a_host, int(it_host[0]), float(residual_host[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--m", type=int, default=64, help="grid rows")
    parser.add_argument("--n", type=int, default=64, help="grid columns")
    parser.add_argument(
        "--tol",
        type=float,
        default=1e-3,
        help="stop when the largest change of a sweep is at most this",
    )
    parser.add_argument("--max-iterations", type=int, default=400)
    parser.add_argument(
        "--body",
        default="xp",
        choices=[*BODIES, "all"],
        help="who writes the task bodies (all: every installed one)",
    )
    parser.add_argument("--backend", default="auto", choices=["auto", "cuda", "emulated"])
    args = parser.parse_args(argv)
    backend = None if args.backend == "auto" else args.backend
    expected, expected_sweeps, _ = reference(
        args.m, args.n, args.tol, args.max_iterations
    )
    failed = False
    for body in BODIES if args.body == "all" else (args.body,):
        why = available(body) or (prepare_numba(backend) if body == "numba" else "")
        slow = (
            simulator_estimate(args.m, args.n, expected_sweeps)
            if body == "numba" and not why
            else 0.0
        )
        if slow > SIMULATOR_BUDGET_SECONDS:
            quick = "--body numba --m 16 --n 16 --max-iterations 20"
            note = (
                f"Numba's CUDA simulator runs every GPU thread in Python: this "
                f"{args.m}x{args.n} grid, {expected_sweeps} sweeps, takes about "
                f"{slow / 60:.0f} min; {quick} checks it in seconds"
            )
            if args.body == "all":
                why = note
            else:
                print(f"note: {note}", flush=True)
        if why:
            print(f"SKIP {body}: {why}")
            continue
        start = time.perf_counter()
        u, sweeps, residual = solve(
            args.m, args.n, args.tol, args.max_iterations, body, backend
        )
        elapsed = time.perf_counter() - start
        error = float(np.max(np.abs(u - expected)))
        ok = sweeps == expected_sweeps and error <= 1e-12
        failed |= not ok
        print(
            f"{'PASS' if ok else 'FAIL'} {body}: {args.m}x{args.n} grid, {sweeps} "
            f"sweeps (NumPy: {expected_sweeps}), residual {residual:.3e}, max error "
            f"vs NumPy {error:.2e}, {elapsed:.3f} s"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
