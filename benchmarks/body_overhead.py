"""What a task body costs on the host, piece by piece (CUDA, one device).

    python benchmarks/body_overhead.py [--tile 64] [--count 2000] [--json out.json]

Small tiles, so that the host side is what is measured: the same GEMM update
``c -= a @ bᵀ`` called directly (CuPy's ``@``, ``stflow.linalg.gemm``), and as stflow
tasks (no body, an empty ``t.run`` body, a ``t.run`` body calling
``stflow.linalg.gemm``), in microseconds per call or task, the device synchronised at
the end of each loop; and 16 such products, as 16 ``gemm`` calls against one
``gemm_batched`` call. The tiled Cholesky's small-tile speed (B5) is bounded by the
``t.run + linalg.gemm`` line.

The ``t.run pieces`` lines take an empty ``t.run`` apart, called many times inside one
started task: the whole call, the dependencies' instances (``_body_instances``), the
CuPy arrays over them, and CuPy's stream context (``body_stream``).
"""

from __future__ import annotations

import argparse
import json
import time

import stflow as stf
from stflow import linalg


def _per_call(fn, count: int, sync) -> float:
    fn()
    sync()
    start = time.perf_counter()
    for _ in range(count):
        fn()
    sync()
    return (time.perf_counter() - start) / count * 1e6


def _gemm_body(xp, a, b, c) -> None:
    linalg.gemm(a, b, c, alpha=-1.0, beta=1.0, trans_b=True)


def _empty_body(xp, *arrays) -> None:
    pass


def _tasks(cupy, tile: int, count: int, body) -> float:
    a, b, c = (cupy.ones((tile, tile)) for _ in range(3))
    ctx = stf.context(backend="cuda")
    la, lb, lc = (ctx.logical_data(x) for x in (a, b, c))

    def one() -> None:
        with ctx.task(la.read(), lb.read(), lc.rw()) as t:
            if body is not None:
                t.run(body)

    seconds = _per_call(one, count, lambda: ctx.wait(lc))
    ctx.finalize()
    return seconds


def _pieces(cupy, tile: int, count: int) -> dict[str, float]:
    """An empty ``t.run`` taken apart, inside one started task (µs per call)."""
    from stflow.interop.cupy import allocation_array, body_stream

    a, b, c = (cupy.ones((tile, tile)) for _ in range(3))
    ctx = stf.context(backend="cuda")
    la, lb, lc = (ctx.logical_data(x) for x in (a, b, c))
    sync = cupy.cuda.Device().synchronize
    with ctx.task(la.read(), lb.read(), lc.rw()) as t:
        stream, instances = t._body_instances(())
        handle, device = int(stream.handle), stream.ordinal

        def arrays() -> None:
            for allocation, shape, dtype, _ in instances:
                allocation_array(cupy, allocation, shape, dtype, device)

        def context() -> None:
            with body_stream(handle):
                pass

        rows = {
            "t.run pieces: whole empty t.run": _per_call(
                lambda: t.run(_empty_body), count, sync
            ),
            "t.run pieces: _body_instances": _per_call(
                lambda: t._body_instances(()), count, sync
            ),
            "t.run pieces: 3 CuPy arrays": _per_call(arrays, count, sync),
            "t.run pieces: stream context": _per_call(context, count, sync),
        }
    ctx.finalize()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tile", type=int, default=64)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    import cupy

    a, b, c = (cupy.ones((args.tile, args.tile)) for _ in range(3))
    sync = cupy.cuda.Device().synchronize

    def cupy_gemm() -> None:
        c.__isub__(a @ b.T)

    batch_a, batch_c = (cupy.ones((16, args.tile, args.tile)) for _ in range(2))

    def sixteen_gemms() -> None:
        for i in range(16):
            linalg.gemm(batch_a[i], b, batch_c[i], alpha=-1.0, beta=1.0, trans_b=True)

    def one_batched() -> None:
        linalg.gemm_batched(batch_a, b, batch_c, alpha=-1.0, beta=1.0, trans_b=True)

    rows = {
        "cupy a @ b.T": _per_call(cupy_gemm, args.count, sync),
        "linalg.gemm": _per_call(
            lambda: linalg.gemm(a, b, c, alpha=-1.0, beta=1.0, trans_b=True),
            args.count,
            sync,
        ),
        "task, no body": _tasks(cupy, args.tile, args.count, None),
        "task, empty t.run": _tasks(cupy, args.tile, args.count, _empty_body),
        "task, t.run + linalg.gemm": _tasks(cupy, args.tile, args.count, _gemm_body),
        "16 x linalg.gemm": _per_call(sixteen_gemms, args.count // 16 or 1, sync),
        "linalg.gemm_batched of 16": _per_call(one_batched, args.count, sync),
        **_pieces(cupy, args.tile, args.count),
    }
    for name, micros in rows.items():
        print(f"{name:34s} {micros:8.1f} us")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=2)


if __name__ == "__main__":
    main()
