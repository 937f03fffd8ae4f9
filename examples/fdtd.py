"""A 3-D FDTD (Yee) solver of Maxwell's equations, the time loop on the device.

    python examples/fdtd.py [--size 24] [--steps 40] [--backend auto|cuda|emulated]

The algorithm
-------------
The electric field ``E = (ex, ey, ez)`` and the magnetic field ``H = (hx, hy, hz)``
live on a staggered ``size³`` grid (normalised units: ``c = 1``, unit cells, time step
``dt = 0.5``, below the 3-D Courant limit ``1/√3``). Every step updates E from the
curl of H, adds a point source (a sine in time at the centre, on ``ez``), then updates
H from the curl of E::

    ex += dt/ε · (∂y hz - ∂z hy)        hx -= dt · (∂y ez - ∂z ey)
    ey += dt/ε · (∂z hx - ∂x hz)        hy -= dt · (∂z ex - ∂x ez)
    ez += dt/ε · (∂x hy - ∂y hx)        hz -= dt · (∂x ey - ∂y ex)

with one-cell differences, the E components held at 0 on the outer faces (a perfectly
conducting box). ``ε`` is 1 except in a dielectric slab (``ε = 4``). The fields are
checked against the same updates run one after the other in NumPy, and the field
energy is printed.

What it shows
-------------
- Six **fields as logical data**, one per component; each update is a task declaring
  what it reads and writes, so the three E updates (and the three H updates) may run
  concurrently while every H update waits for the E components it reads.
- ``1/ε`` is **read-only** data (``set_read_only()``): read by every E update, copied
  to the device once and never snapshotted by the loop.
- Every body is the backend-neutral **``t.run(fn, ...)``**: ``fn(xp, *arrays)`` with
  NumPy on the emulated backend and CuPy on CUDA.
- **A device-side time loop**: after one step in stream mode (which compiles the CuPy
  kernels outside any graph), the other steps run in ``sctx.repeat(steps - 1)``: the
  body is recorded once and the device runs it. The source needs the time of the step
  it runs in, and a recorded body cannot take it from Python (its Python values are
  frozen at recording), so the step counter is one-element device data that the source
  task reads and increments.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any

import numpy as np

import stflow as stf

DT = 0.5
OMEGA = 2.0 * math.pi / 20.0  # a period of 20 time steps
EPSILON_SLAB = 4.0


# -- the updates, written once against an array module xp ------------------------------


def update_ex(xp: Any, ex: Any, hy: Any, hz: Any, inv_eps: Any) -> None:
    i = (slice(1, -1),) * 3
    ex[i] += (
        DT * inv_eps[i] * ((hz[i] - hz[1:-1, :-2, 1:-1]) - (hy[i] - hy[1:-1, 1:-1, :-2]))
    )


def update_ey(xp: Any, ey: Any, hx: Any, hz: Any, inv_eps: Any) -> None:
    i = (slice(1, -1),) * 3
    ey[i] += (
        DT * inv_eps[i] * ((hx[i] - hx[1:-1, 1:-1, :-2]) - (hz[i] - hz[:-2, 1:-1, 1:-1]))
    )


def update_ez(xp: Any, ez: Any, hx: Any, hy: Any, inv_eps: Any) -> None:
    i = (slice(1, -1),) * 3
    ez[i] += (
        DT * inv_eps[i] * ((hy[i] - hy[:-2, 1:-1, 1:-1]) - (hx[i] - hx[1:-1, :-2, 1:-1]))
    )


def update_hx(xp: Any, hx: Any, ey: Any, ez: Any) -> None:
    o = (slice(0, -1),) * 3
    hx[o] -= DT * ((ez[:-1, 1:, :-1] - ez[o]) - (ey[:-1, :-1, 1:] - ey[o]))


def update_hy(xp: Any, hy: Any, ex: Any, ez: Any) -> None:
    o = (slice(0, -1),) * 3
    hy[o] -= DT * ((ex[:-1, :-1, 1:] - ex[o]) - (ez[1:, :-1, :-1] - ez[o]))


def update_hz(xp: Any, hz: Any, ex: Any, ey: Any) -> None:
    o = (slice(0, -1),) * 3
    hz[o] -= DT * ((ey[1:, :-1, :-1] - ey[o]) - (ex[:-1, 1:, :-1] - ex[o]))


def source(xp: Any, ez: Any, step: Any) -> None:
    """``ez`` at the centre += sin(ω · dt · step); then the step counter advances."""
    c = ez.shape[0] // 2
    point = ez[c, c, c : c + 1]
    point += xp.sin(OMEGA * DT * step.astype(xp.float64))
    step += 1


def inverse_permittivity(size: int) -> np.ndarray:
    """``1/ε``: 1, and ``1/EPSILON_SLAB`` in a slab across the last quarter of x."""
    inv_eps = np.ones((size,) * 3)
    inv_eps[3 * size // 4 :, :, :] = 1.0 / EPSILON_SLAB
    return inv_eps


def energy(fields: dict[str, np.ndarray]) -> float:
    """``Σ (ε |E|² + |H|²) / 2`` (ε taken as 1: a measure of activity, not physics)."""
    return 0.5 * float(sum(np.sum(f * f) for f in fields.values()))


# -- the NumPy reference and the stflow run ---------------------------------------------

_NAMES = ("ex", "ey", "ez", "hx", "hy", "hz")


def reference(size: int, steps: int) -> dict[str, np.ndarray]:
    """The same steps in NumPy, one update after the other."""
    f = {name: np.zeros((size,) * 3) for name in _NAMES}
    inv_eps = inverse_permittivity(size)
    step = np.zeros(1, dtype=np.int64)
    for _ in range(steps):
        update_ex(np, f["ex"], f["hy"], f["hz"], inv_eps)
        update_ey(np, f["ey"], f["hx"], f["hz"], inv_eps)
        update_ez(np, f["ez"], f["hx"], f["hy"], inv_eps)
        source(np, f["ez"], step)
        update_hx(np, f["hx"], f["ey"], f["ez"])
        update_hy(np, f["hy"], f["ex"], f["ez"])
        update_hz(np, f["hz"], f["ex"], f["ey"])
    return f


def run(
    size: int, steps: int, backend: str | None = None, loop: bool = True
) -> dict[str, np.ndarray]:
    """``steps`` FDTD steps through stflow; ``loop=False`` submits every step from
    the host (stream mode) instead of the device-side ``repeat``."""
    if size < 4:
        raise ValueError("the grid needs at least 4 cells per side")
    fields = {name: np.zeros((size,) * 3) for name in _NAMES}
    step_host = np.zeros(1, dtype=np.int64)
    with stf.stackable_context(backend=backend) as sctx:
        ld = {name: sctx.logical_data(array, name=name) for name, array in fields.items()}
        inv_eps = sctx.logical_data(inverse_permittivity(size), name="1/eps")
        inv_eps.set_read_only()
        step = sctx.logical_data(step_host, name="step")
        ex, ey, ez, hx, hy, hz = (ld[name] for name in _NAMES)

        def one_step() -> None:
            for fn, out, a, b in (
                (update_ex, ex, hy, hz),
                (update_ey, ey, hx, hz),
                (update_ez, ez, hx, hy),
            ):
                with sctx.task(
                    out.rw(), a.read(), b.read(), inv_eps.read(), symbol=fn.__name__
                ) as t:
                    t.run(fn)
            with sctx.task(ez.rw(), step.rw(), symbol="source") as t:
                t.run(source)
            for fn, out, a, b in (
                (update_hx, hx, ey, ez),
                (update_hy, hy, ex, ez),
                (update_hz, hz, ex, ey),
            ):
                with sctx.task(out.rw(), a.read(), b.read(), symbol=fn.__name__) as t:
                    t.run(fn)

        if steps:
            one_step()  # stream mode: compiles the kernels
        if loop:
            with sctx.repeat(max(steps - 1, 0)):
                one_step()
        else:
            for _ in range(steps - 1):
                one_step()
    return fields


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=24, help="cells per side")
    parser.add_argument("--steps", type=int, default=40, help="time steps")
    parser.add_argument(
        "--host-loop",
        action="store_true",
        help="submit every step from the host instead of sctx.repeat",
    )
    parser.add_argument("--backend", default="auto", choices=["auto", "cuda", "emulated"])
    args = parser.parse_args(argv)
    backend = None if args.backend == "auto" else args.backend
    start = time.perf_counter()
    fields = run(args.size, args.steps, backend, loop=not args.host_loop)
    elapsed = time.perf_counter() - start
    expected = reference(args.size, args.steps)
    scale = max(float(np.max(np.abs(f))) for f in expected.values())
    error = max(float(np.max(np.abs(fields[n] - expected[n]))) for n in _NAMES)
    ok = bool(np.isfinite(error)) and scale > 0 and error <= 1e-12 * scale
    print(
        f"{'PASS' if ok else 'FAIL'}: {args.steps} FDTD steps on a {args.size}^3 grid "
        f"in {elapsed:.3f} s; field energy {energy(fields):.6e} (NumPy "
        f"{energy(expected):.6e}), max error {error:.2e}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
