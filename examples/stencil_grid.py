"""A 1-D heat stencil over every device: one task per step on a grid of places, the
arrays spread over the devices' memory by a composite data place.

    python examples/stencil_grid.py [--n 1000000] [--steps 50] [--places 0]
                                    [--backend auto|cuda|emulated]

The grid has one place per device, like ``exec_place_grid.machine()`` (``--places
k`` builds a grid of ``k`` places over the devices instead, repeating them, so a
single GPU runs a multi-member grid too). Both arrays live at ``data_place.composite(grid, blocked())``:
member ``i``'s block of every array is in member ``i``'s memory. At each step one task
on the grid reads ``u`` and writes ``v``; the body enqueues member ``i``'s block on
``task.get_stream_at_index(i)``, reading one halo value on each side (from the
neighbour's memory: a body sees the whole array). The result is checked against NumPy.

On CUDA the members launch CuPy element-wise kernels; on the emulated backend they are
NumPy functions enqueued with ``stflow.emulated.launch``.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

import stflow as stf
from stflow.backends import get_backend

ALPHA = 0.25


def reference(u0: np.ndarray, steps: int) -> np.ndarray:
    """The same stencil in NumPy (fixed boundary values)."""
    u = u0.copy()
    for _ in range(steps):
        v = u.copy()
        v[1:-1] = u[1:-1] + ALPHA * (u[:-2] - 2 * u[1:-1] + u[2:])
        u = v
    return u


def _blocks(n: int, parts: int) -> list[tuple[int, int]]:
    return [(i * n // parts, (i + 1) * n // parts) for i in range(parts)]


def _update(xp: Any, u: Any, v: Any, lo: int, hi: int) -> None:
    """``v[lo:hi]`` from ``u`` (boundary elements copied unchanged)."""
    n = u.shape[0]
    inner_lo, inner_hi = max(lo, 1), min(hi, n - 1)
    if lo < inner_lo:
        v[lo:inner_lo] = u[lo:inner_lo]
    if inner_hi < hi:
        v[inner_hi:hi] = u[inner_hi:hi]
    if inner_lo < inner_hi:
        v[inner_lo:inner_hi] = u[inner_lo:inner_hi] + ALPHA * (
            u[inner_lo - 1 : inner_hi - 1]
            - 2 * u[inner_lo:inner_hi]
            + u[inner_lo + 1 : inner_hi + 1]
        )


def _member_work(t: Any, member: int, device: int, lo: int, hi: int) -> None:
    """Enqueue member ``member``'s block of the step on its stream."""
    stream = t.get_stream_at_index(member)
    u, v = t.get_arg_cai(0), t.get_arg_cai(1)
    if t._runtime.backend.name == "emulated":
        from stflow.emulated import launch

        launch(stream, lambda a, b: _update(np, a, b, lo, hi), u, v)
        return
    import cupy

    from stflow.interop.cupy import as_cupy, cupy_stream

    with cupy.cuda.Device(device), cupy_stream(stream):
        _update(cupy, as_cupy(u), as_cupy(v), lo, hi)


def run(
    u0: np.ndarray, steps: int, places: int = 0, backend: str | None = None
) -> tuple[np.ndarray, int]:
    """``steps`` stencil steps of ``u0`` on a grid; returns the result and the
    number of grid members."""
    with stf.context(backend=backend) as ctx:
        # One place per device of the context's backend (what exec_place_grid.machine()
        # gives when that backend is the default one).
        devices = get_backend(ctx.backend).device_count
        grid = stf.exec_place_grid.create(
            [stf.exec_place.device(i % devices) for i in range(places or devices)]
        )
        spread = stf.data_place.composite(grid, stf.partitions.blocked())
        grid.set_affine_data_place(spread)
        result = u0.copy()
        u = ctx.logical_data(result, name="u")
        v = ctx.logical_data_empty(u0.shape, u0.dtype, name="v")
        blocks = _blocks(u0.size, grid.size)
        for _ in range(steps):
            with ctx.task(grid, u.read(), v.write()) as t:
                for member, (lo, hi) in enumerate(blocks):
                    _member_work(t, member, grid[member].device_id, lo, hi)
            u, v = v, u
        if steps % 2:  # the latest values are in ``v``'s data
            with ctx.task(grid, u.read(), v.write()) as t:
                for member, (lo, hi) in enumerate(blocks):
                    stream = t.get_stream_at_index(member)
                    _copy_block(t, stream, grid[member].device_id, lo, hi)
        members = grid.size
    return result, members


def _copy_block(t: Any, stream: Any, device: int, lo: int, hi: int) -> None:
    def copy(xp: Any, a: Any, b: Any) -> None:
        b[lo:hi] = a[lo:hi]

    u, v = t.get_arg_cai(0), t.get_arg_cai(1)
    if t._runtime.backend.name == "emulated":
        from stflow.emulated import launch

        launch(stream, lambda a, b: copy(np, a, b), u, v)
        return
    import cupy

    from stflow.interop.cupy import as_cupy, cupy_stream

    with cupy.cuda.Device(device), cupy_stream(stream):
        copy(cupy, as_cupy(u), as_cupy(v))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="grid points")
    parser.add_argument("--steps", type=int, default=50, help="time steps")
    parser.add_argument(
        "--places", type=int, default=0, help="grid members (0: one per device)"
    )
    parser.add_argument("--backend", default="auto", choices=["auto", "cuda", "emulated"])
    args = parser.parse_args(argv)
    backend = None if args.backend == "auto" else args.backend
    rng = np.random.default_rng(0)
    u0 = rng.uniform(0.0, 1.0, args.n)
    start = time.perf_counter()
    result, members = run(u0, args.steps, args.places, backend)
    elapsed = time.perf_counter() - start
    expected = reference(u0, args.steps)
    ok = np.allclose(result, expected, rtol=1e-12, atol=1e-12)
    print(
        f"{'PASS' if ok else 'FAIL'}: {args.steps} steps of {args.n} points over "
        f"{members} grid member(s) in {elapsed:.3f} s; max error "
        f"{np.max(np.abs(result - expected)):.2e}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
