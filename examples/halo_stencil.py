"""A 2-D heat stencil split over devices, with halo exchange by small tasks.

    python examples/halo_stencil.py [--n 256] [--rows-per-strip 64] [--strips 0]
                                    [--steps 50] [--graph]
                                    [--backend auto|cuda|emulated]

The algorithm
-------------
Explicit heat diffusion on an ``N × n`` grid whose outer rows and columns are held
fixed (the top edge at 1)::

    u'[i, j] = u[i, j] + α (u[i-1, j] + u[i+1, j] + u[i, j-1] + u[i, j+1] - 4 u[i, j])

The rows are cut into ``strips`` horizontal strips of ``rows-per-strip`` rows
(``N = strips × rows-per-strip``); strip ``k`` runs on ``exec_place.device(k %
devices)``. Each strip is **its own logical data** of ``rows + 2`` rows: its rows and
one *ghost row* above and below, copies of the neighbours' edge rows. The result is
checked against the same stencil in NumPy on the whole grid.

One step, for every strip ``k`` (all on strip ``k``'s device)::

    edges(k)    u[k].read()                       -> top[k].write(), bottom[k].write()
    ghosts(k)   bottom[k-1].read(), top[k+1].read() -> u[k].rw()       (ghost rows)
    update(k)   u[k].read()                       -> v[k].rw()       (then u, v swap)

The halo exchange is the two small tasks: ``edges`` copies a strip's first and last
rows into one-row logical data, ``ghosts`` copies the neighbours' rows into the ghost
rows. Only those rows travel between devices, because only they are read elsewhere;
stflow moves them and orders everything from the declared accesses. Nothing is
synchronised by hand.

Weak scaling: keep ``--rows-per-strip`` and ``--n`` and raise ``--strips`` with the
number of devices; the work per device stays the same and each step moves two rows
per strip boundary. ``--graph`` runs the context in graph mode (each epoch one CUDA
graph spanning the devices). Every body is the backend-neutral ``t.run(fn, ...)``.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

import stflow as stf
from stflow.backends import default_backend, get_backend

ALPHA = 0.2


def initial(rows: int, n: int) -> np.ndarray:
    """The start grid: random interior, top edge 1, other edges 0."""
    u = np.random.default_rng(5).uniform(0.0, 0.5, (rows, n))
    u[-1, :] = 0.0
    u[:, 0] = 0.0
    u[:, -1] = 0.0
    u[0, :] = 1.0
    return u


def reference(u0: np.ndarray, steps: int) -> np.ndarray:
    """The stencil on the whole grid in NumPy."""
    u, v = u0.copy(), u0.copy()
    for _ in range(steps):
        c = u[1:-1, 1:-1]
        v[1:-1, 1:-1] = c + ALPHA * (
            u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * c
        )
        u, v = v, u
    return u


# -- task bodies: fn(xp, *arrays), NumPy on the emulated backend, CuPy on CUDA ---------


def _edges(xp: Any, u: Any, top: Any, bottom: Any) -> None:
    top[...] = u[1]
    bottom[...] = u[-2]


def _ghosts(has_above: bool, has_below: bool) -> Any:
    def body(xp: Any, *arrays: Any) -> None:
        rows = list(arrays[:-1])
        u = arrays[-1]
        if has_above:
            u[0] = rows.pop(0)
        if has_below:
            u[-1] = rows.pop(0)

    return body


def _update(first: bool, last: bool) -> Any:
    """Rows ``1 .. rows`` of the strip, less the grid's fixed first and last rows."""

    def body(xp: Any, u: Any, v: Any) -> None:
        lo, hi = 1 + first, u.shape[0] - 1 - last
        c = u[lo:hi, 1:-1]
        v[lo:hi, 1:-1] = c + ALPHA * (
            u[lo - 1 : hi - 1, 1:-1]
            + u[lo + 1 : hi + 1, 1:-1]
            + u[lo:hi, :-2]
            + u[lo:hi, 2:]
            - 4.0 * c
        )

    return body


def run(
    u0: np.ndarray,
    strips: int,
    steps: int,
    backend: str | None = None,
    use_graph: bool = False,
) -> tuple[np.ndarray, int, Any]:
    """``steps`` stencil steps of ``u0`` over ``strips`` strips; returns the result,
    the number of devices used and ``ctx.statistics()`` (copies and bytes moved)."""
    rows_total, n = u0.shape
    if strips < 1 or rows_total < strips or rows_total < 3 or n < 3:
        raise ValueError("need a grid of at least 3 x 3 and a row per strip")
    bounds = [k * rows_total // strips for k in range(strips + 1)]
    # Each strip with a ghost row above and below (the grid's outer rows get zeros
    # there, never read).
    padded = np.zeros((rows_total + 2, n))
    padded[1:-1] = u0
    hosts_u = [padded[a : b + 2].copy() for a, b in zip(bounds[:-1], bounds[1:])]
    hosts_v = [h.copy() for h in hosts_u]  # same fixed edges in both buffers
    with stf.context(backend=backend, use_graph=use_graph) as ctx:
        devices = min(get_backend(ctx.backend).device_count, strips)
        place = [stf.exec_place.device(k % devices) for k in range(strips)]
        u = [ctx.logical_data(h, name=f"u[{k}]") for k, h in enumerate(hosts_u)]
        v = [ctx.logical_data(h, name=f"v[{k}]") for k, h in enumerate(hosts_v)]
        top = [
            ctx.logical_data_empty((n,), np.float64, name=f"top[{k}]")
            for k in range(strips)
        ]
        bottom = [
            ctx.logical_data_empty((n,), np.float64, name=f"bottom[{k}]")
            for k in range(strips)
        ]
        ghosts = [_ghosts(k > 0, k < strips - 1) for k in range(strips)]
        updates = [_update(k == 0, k == strips - 1) for k in range(strips)]
        for _ in range(steps):
            if strips > 1:
                for k in range(strips):
                    with ctx.task(
                        place[k],
                        u[k].read(),
                        top[k].write(),
                        bottom[k].write(),
                        symbol=f"edges[{k}]",
                    ) as t:
                        t.run(_edges)
                for k in range(strips):
                    halos = ([bottom[k - 1].read()] if k > 0 else []) + (
                        [top[k + 1].read()] if k < strips - 1 else []
                    )
                    with ctx.task(
                        place[k], *halos, u[k].rw(), symbol=f"ghosts[{k}]"
                    ) as t:
                        t.run(ghosts[k])
            for k in range(strips):
                # rw, not write: the update leaves v's fixed edges as they are
                with ctx.task(
                    place[k], u[k].read(), v[k].rw(), symbol=f"update[{k}]"
                ) as t:
                    t.run(updates[k])
            u, v = v, u
    latest = hosts_v if steps % 2 else hosts_u
    return np.concatenate([h[1:-1] for h in latest]), devices, ctx.statistics()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=256, help="grid columns")
    parser.add_argument("--rows-per-strip", type=int, default=64)
    parser.add_argument(
        "--strips", type=int, default=0, help="strips (0: one per device)"
    )
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--graph", action="store_true", help="graph mode")
    parser.add_argument("--backend", default="auto", choices=["auto", "cuda", "emulated"])
    args = parser.parse_args(argv)
    backend = None if args.backend == "auto" else args.backend  # None: STFLOW_BACKEND
    native = default_backend() if backend is None else get_backend(backend)
    strips = args.strips or native.device_count
    u0 = initial(strips * args.rows_per_strip, args.n)
    start = time.perf_counter()
    result, devices, statistics = run(u0, strips, args.steps, backend, args.graph)
    elapsed = time.perf_counter() - start
    expected = reference(u0, args.steps)
    error = float(np.max(np.abs(result - expected)))
    ok = error <= 1e-12
    cells = u0.size * args.steps
    print(
        f"{'PASS' if ok else 'FAIL'}: {args.steps} steps of a {u0.shape[0]}x{args.n} "
        f"grid in {strips} strip(s) over {devices} device(s) in {elapsed:.3f} s "
        f"({cells / elapsed / 1e6:.1f} Mcell/s); max error vs NumPy {error:.2e}"
    )
    print(
        f"moved between devices: {statistics.bytes_d2d} B in "
        f"{statistics.copies_d2d} copies (the halo rows)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
