"""B8: the tiled Cholesky end to end, from a NumPy matrix to its NumPy factor.

    python benchmarks/b8_end_to_end.py [--sizes 8192 16384 32768] [--nb 2048]
                                       [--repeats 3] [--json out.json]

Everything a caller waits for is timed, in the same process, best of ``--repeats``
after a warm-up of each variant at the smallest size:

``stflow``
    ``examples/cholesky.py``'s ``cholesky(a, nb)``: the tiles of ``a`` registered in
    place (page-locking ``a``), moved by pitched copies, factorised, the factor's
    tiles written on the devices and back into a new array at ``finalize()``.
``stflow in place``
    the same with ``overwrite_a=True`` (a copy of ``a`` made before the clock starts):
    one matrix page-locked and moved, as LAPACK's in-place ``potrf``.
``stflow in place, page-locked`` / ``stflow in place, staged`` / ``stflow, staged``
    the same with ``STFLOW_PIN_LIMIT`` unset (the matrix page-locked whole) and set to
    0 (nothing page-locked: the tiles' copies staged through pinned chunks by host
    threads, ``stflow/backends/_cuda_staging.py``); the other variants run with the
    setting the environment gives.
``stflow, budget n²·4 B``
    ``stflow`` within a device memory budget of half the matrix, where the libraries
    below cannot run at all (the tiles are evicted and brought back).
``CuPy``
    ``cupy.asnumpy(cupy.linalg.cholesky(cupy.asarray(a)))``.
``PyTorch``
    ``torch.linalg.cholesky_ex(torch.from_numpy(a).cuda())[0].cpu()``.
``device-resident``
    the example's ``--devices 1`` figure: its factorisation of tiles already on the
    device, the reference for the fraction of the device's rate end to end reaches.

TFLOP/s count n³/3 flops. The factors are checked (8 rows of L Lᵀ against A).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import time
from collections.abc import Callable
from typing import Any

import numpy as np

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "cholesky.py"


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("cholesky_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _best(
    run: Callable[[], tuple[np.ndarray, float]], repeats: int
) -> tuple[float, np.ndarray]:
    best, factor = float("inf"), None
    for _ in range(repeats):
        factor, seconds = run()
        best = min(best, seconds)
    assert factor is not None
    return best, factor


def _timed(fn: Callable[[], np.ndarray]) -> Callable[[], tuple[np.ndarray, float]]:
    def run() -> tuple[np.ndarray, float]:
        start = time.perf_counter()
        factor = fn()
        return factor, time.perf_counter() - start

    return run


def variants(example: Any, a: np.ndarray, nb: int) -> dict[str, Callable[[], Any]]:
    """What is measured, each returning ``(factor, seconds)``."""
    import cupy
    import torch

    def in_place() -> tuple[np.ndarray, float]:
        copy = a.copy()  # before the clock starts
        return example.cholesky(copy, nb, "cuda", overwrite_a=True)

    def cupy_call() -> np.ndarray:
        factor = cupy.asnumpy(cupy.linalg.cholesky(cupy.asarray(a)))
        cupy.cuda.Device().synchronize()
        return factor

    def torch_call() -> np.ndarray:
        factor, _ = torch.linalg.cholesky_ex(torch.from_numpy(a).cuda())
        return factor.cpu().numpy()

    def staged(run: Callable[[], Any], limit: str | None) -> Callable[[], Any]:
        def variant() -> Any:
            before = os.environ.get("STFLOW_PIN_LIMIT")
            if limit is None:
                os.environ.pop("STFLOW_PIN_LIMIT", None)
            else:
                os.environ["STFLOW_PIN_LIMIT"] = limit  # read at each registration
            try:
                return run()
            finally:
                if before is None:
                    os.environ.pop("STFLOW_PIN_LIMIT", None)
                else:
                    os.environ["STFLOW_PIN_LIMIT"] = before

        return variant

    budget = a.nbytes // 2
    return {
        "stflow": lambda: example.cholesky(a, nb, "cuda"),
        "stflow in place": in_place,
        "stflow in place, page-locked": staged(in_place, None),
        "stflow in place, staged": staged(in_place, "0"),
        "stflow, staged": staged(lambda: example.cholesky(a, nb, "cuda"), "0"),
        "stflow, budget half the matrix": lambda: example.cholesky(
            a, nb, "cuda", memory_budget=budget
        ),
        "CuPy": _timed(cupy_call),
        "PyTorch": _timed(torch_call),
        "device-resident": lambda: example.cholesky(a, nb, "cuda", devices=1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[8192, 16384, 32768])
    parser.add_argument("--nb", type=int, default=2048, help="tile size")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--only",
        nargs="*",
        default=None,
        help="measure only these variants (names as printed)",
    )
    parser.add_argument("--json", default=None, help="write the results there")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="after the measurements, profile one call of each stflow "
        "variant at the largest size (cProfile, top 20 cumulative)",
    )
    args = parser.parse_args(argv)
    example = _example()
    warm = example.spd_matrix(min(args.sizes) // 4)
    results: list[dict[str, Any]] = []
    for n in args.sizes:
        a = example.spd_matrix(n)
        runs = variants(example, a, min(args.nb, n))
        if args.only:
            runs = {name: run for name, run in runs.items() if name in args.only}
        for name, run in variants(example, warm, min(args.nb, len(warm))).items():
            if name in runs and "budget" not in name:  # (too small for a budget)
                run()  # libraries' setup, caches
        row: dict[str, Any] = {"n": n, "nb": args.nb}
        for name, run in runs.items():
            seconds, factor = _best(run, args.repeats)
            ok, _, checked = example.check_factor(a, factor, full=False)
            row[name] = seconds
            row[f"{name} check"] = checked.strip(", ") + ("" if ok else " FAILED")
            print(
                f"n={n:6d} {name:32s} {seconds:8.3f} s "
                f"{n**3 / 3 / seconds / 1e12:7.2f} TFLOP/s  {row[f'{name} check']}",
                flush=True,
            )
            del factor
        if "CuPy" in row and "stflow" in row:
            print(
                f"n={n:6d} stflow / CuPy end to end: {row['CuPy'] / row['stflow']:.2f}x"
                f" faster; in place {row['CuPy'] / row.get('stflow in place', np.nan):.2f}x",
                flush=True,
            )
        if "device-resident" in row and "stflow" in row:
            print(
                f"n={n:6d} end to end reaches {row['device-resident'] / row['stflow']:.2f}"
                f" of the device-resident rate",
                flush=True,
            )
        results.append(row)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2))
    if args.profile:
        import cProfile
        import pstats

        n = max(args.sizes)
        a = example.spd_matrix(n)
        for name, run in variants(example, a, min(args.nb, n)).items():
            if name.startswith("stflow") and "budget" not in name:
                print(f"== profile: {name}, n={n}")
                profile = cProfile.Profile()
                profile.runcall(run)
                pstats.Stats(profile).sort_stats("cumulative").print_stats(20)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
