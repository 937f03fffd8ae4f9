"""B5: tiled Cholesky (fp64) with stflow against one cuSOLVER call, on one GPU.

    python benchmarks/b5_cholesky.py [--sizes 8192 16384 32768] [--tiles 512 1024 2048]
                                     [--graph] [--json out.json]

The matrix is made on the device (random symmetric, diagonally dominant); its tiles are
CuPy arrays registered as logical data on the device, so the factorisation moves no
bytes. The tasks are those of ``examples/cholesky.py``: ``stflow.linalg`` calls
(cuSOLVER ``potrf``, cuBLAS ``trsm`` / ``syrk`` / ``gemm``) on the task streams, and
with ``--graph`` the same calls recorded once per epoch as a CUDA graph. The time runs
from the first submission to the end of ``finalize()``; the reference is
``cupy.linalg.cholesky`` (cuSOLVER ``potrf``) of the whole matrix, timed in the same
process after a warm-up. TFLOP/s count n³/3 flops. Modes: ``stream`` (tasks submitted
one by one), ``graph`` (``context(use_graph=True)``: the whole factorisation captured,
instantiated and launched once, all timed) and ``replay`` (the factorisation recorded
once in a ``launchable_graph_scope`` with a copy of the matrix into the tiles first,
then launched again: the mean time of a launch).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import time

import stflow as stf

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "cholesky.py"


def _example():
    spec = importlib.util.spec_from_file_location("cholesky_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def spd(cupy, n: int):
    r = cupy.random.RandomState(0).uniform(-1.0, 1.0, (n, n))
    a = r + r.T
    a[cupy.arange(n), cupy.arange(n)] += 2.0 * n
    return a


def cusolver_seconds(cupy, a, repeats: int = 3) -> tuple[float, object]:
    cupy.linalg.cholesky(a)
    cupy.cuda.Device().synchronize()
    best = float("inf")
    result = None
    for _ in range(repeats):
        start = time.perf_counter()
        result = cupy.linalg.cholesky(a)
        cupy.cuda.Device().synchronize()
        best = min(best, time.perf_counter() - start)
    return best, result


def stflow_seconds(cupy, example, a, nb: int, use_graph: bool) -> tuple[float, dict]:
    n = a.shape[0]
    count = n // nb
    parts = {
        (i, j): cupy.ascontiguousarray(a[i * nb : (i + 1) * nb, j * nb : (j + 1) * nb])
        for i in range(count)
        for j in range(i + 1)
    }
    cupy.cuda.Device().synchronize()
    ctx = stf.context(backend="cuda", use_graph=use_graph)
    tiles = {key: ctx.logical_data(part) for key, part in parts.items()}
    start = time.perf_counter()
    example.factorize(ctx, tiles, count)
    ctx.finalize()
    cupy.cuda.Device().synchronize()
    return time.perf_counter() - start, parts


def _copy(xp, source, target) -> None:
    target[...] = source


def stflow_replay_seconds(
    cupy, example, a, nb: int, launches: int = 3
) -> tuple[float, dict]:
    """The factorisation recorded once as a launchable graph (each launch first
    copies the matrix's tiles into the working tiles, then factors them) and
    launched ``launches`` times: the mean seconds of one launch."""
    n = a.shape[0]
    count = n // nb
    keys = [(i, j) for i in range(count) for j in range(i + 1)]
    source = {
        key: cupy.ascontiguousarray(
            a[key[0] * nb : (key[0] + 1) * nb, key[1] * nb : (key[1] + 1) * nb]
        )
        for key in keys
    }
    parts = {key: cupy.empty_like(source[key]) for key in keys}
    cupy.cuda.Device().synchronize()
    sctx = stf.stackable_context(backend="cuda")
    sources = {key: sctx.logical_data(source[key]) for key in keys}
    tiles = {key: sctx.logical_data(parts[key]) for key in keys}
    with sctx.launchable_graph_scope() as recorded:
        for key in keys:
            with sctx.task(sources[key].read(), tiles[key].write()) as t:
                t.run(_copy)
        example.factorize(sctx, tiles, count)
        recorded.launch()  # records, instantiates, runs once
        cupy.cuda.Device().synchronize()
        start = time.perf_counter()
        for _ in range(launches):
            recorded.launch()
        cupy.cuda.Device().synchronize()
        seconds = (time.perf_counter() - start) / launches
    sctx.finalize()
    del source
    return seconds, parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[8192, 16384, 32768])
    parser.add_argument("--tiles", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument(
        "--graph",
        action="store_true",
        help="also in graph mode (recorded, instantiated and run once) "
        "and as a recorded graph replayed",
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    import cupy

    example = _example()
    stflow_seconds(cupy, example, spd(cupy, 2048), 512, False)  # warm-up
    if args.graph:
        stflow_seconds(cupy, example, spd(cupy, 2048), 512, True)
        stflow_replay_seconds(cupy, example, spd(cupy, 2048), 512, launches=1)
    rows = []
    warmed: set[int] = set()
    print(
        f"{'n':>6} {'nb':>5} {'mode':>6} {'stflow s':>9} {'TFLOP/s':>8} "
        f"{'cuSOLVER s':>10} {'TFLOP/s':>8} {'ratio':>6} {'error':>8}"
    )
    for n in args.sizes:
        a = spd(cupy, n)
        reference, expected = cusolver_seconds(cupy, a)
        flops = n**3 / 3
        for nb in args.tiles:
            if n % nb or n // nb < 2:
                continue
            if nb not in warmed:  # the kernels of this tile size, loaded once
                warmed.add(nb)
                for use_graph in [False, True] if args.graph else [False]:
                    stflow_seconds(cupy, example, spd(cupy, 2 * nb), nb, use_graph)
            for mode in ["stream", "graph", "replay"] if args.graph else ["stream"]:
                if mode == "replay":
                    seconds, parts = stflow_replay_seconds(cupy, example, a, nb)
                else:
                    seconds, parts = stflow_seconds(cupy, example, a, nb, mode == "graph")
                count = n // nb
                error = 0.0
                for (i, j), part in parts.items():
                    if i in (0, count - 1) or j == i:
                        want = expected[i * nb : (i + 1) * nb, j * nb : (j + 1) * nb]
                        got = cupy.tril(part) if i == j else part
                        want = cupy.tril(want) if i == j else want
                        error = max(
                            error,
                            float(
                                cupy.max(cupy.abs(got - want)) / cupy.max(cupy.abs(want))
                            ),
                        )
                del parts
                row = {
                    "n": n,
                    "nb": nb,
                    "mode": mode,
                    "stflow_s": seconds,
                    "stflow_tflops": flops / seconds / 1e12,
                    "cusolver_s": reference,
                    "cusolver_tflops": flops / reference / 1e12,
                    "ratio": reference / seconds,
                    "max_rel_error": error,
                }
                rows.append(row)
                print(
                    f"{n:>6} {nb:>5} {row['mode']:>6} {seconds:>9.3f} "
                    f"{row['stflow_tflops']:>8.1f} {reference:>10.3f} "
                    f"{row['cusolver_tflops']:>8.1f} {row['ratio']:>6.2f} "
                    f"{error:>8.1e}",
                    flush=True,
                )
                cupy.get_default_memory_pool().free_all_blocks()
        del a, expected
        cupy.get_default_memory_pool().free_all_blocks()
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=2)


if __name__ == "__main__":
    main()
