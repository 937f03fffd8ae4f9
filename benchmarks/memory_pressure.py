"""Memory pressure: a working set larger than the device memory budget, and many
contexts in a row.

    python benchmarks/memory_pressure.py [--backend cuda] [--budget-mib 2048]
                                         [--contexts 1000] [--json out]

1. Twelve vectors of ``budget / 8`` each (1.5x the budget) updated in a ring, three
   rounds, each task on device 0 reading its neighbour: the runtime evicts the least
   recently used vectors (writing back the only valid copies) and the result must
   equal NumPy's. Reports the time, the evictions and the bytes written back.
2. ``--contexts`` contexts created and finalized one after another, each moving data
   to a device, reducing and evicting: device memory in use and the thread count
   before and after.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from helpers.backends import device_bytes_in_use, one_context_round  # noqa: E402
from helpers.bodies import add_to  # noqa: E402


def working_set(stf, backend: str, budget: int) -> dict:
    count, rounds = 12, 3
    size = budget // 8 // 8  # float64 elements per vector
    arrays = [np.full(size, float(i)) for i in range(count)]
    expected = [a.copy() for a in arrays]
    for _ in range(rounds):
        for i in range(count):
            expected[i] += expected[(i + 1) % count]
    start = time.perf_counter()
    with stf.context(backend=backend, memory_budget=budget) as ctx:
        data = [ctx.logical_data(a) for a in arrays]
        for _ in range(rounds):
            for i in range(count):
                with ctx.task(
                    stf.exec_place.device(0), data[i].rw(), data[(i + 1) % count].read()
                ) as t:
                    add_to(t, 0, 1, 1.0)
        stats = ctx.statistics()
    seconds = time.perf_counter() - start
    exact = all(np.array_equal(a, e) for a, e in zip(arrays, expected))
    return {
        "budget_bytes": budget,
        "working_set_bytes": count * size * 8,
        "tasks": count * rounds,
        "seconds": seconds,
        "evictions": stats.evictions,
        "evicted_bytes": stats.evicted_bytes,
        "written_back_bytes": stats.written_back_bytes,
        "results_exact": exact,
    }


def many_contexts(stf, backend: str, contexts: int) -> dict:
    def one() -> None:
        one_context_round(backend, 1 << 16)  # 512 KiB each

    one()
    gc.collect()
    memory, threads = device_bytes_in_use(backend), threading.active_count()
    start = time.perf_counter()
    for _ in range(contexts):
        one()
    seconds = time.perf_counter() - start
    gc.collect()
    return {
        "contexts": contexts,
        "seconds": seconds,
        "device_bytes_before": memory,
        "device_bytes_after": device_bytes_in_use(backend),
        "threads_before": threads,
        "threads_after": threading.active_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cuda")
    parser.add_argument("--budget-mib", type=int, default=2048)
    parser.add_argument("--contexts", type=int, default=1000)
    parser.add_argument("--json")
    args = parser.parse_args()
    import stflow as stf

    pressure = working_set(stf, args.backend, args.budget_mib << 20)
    print(
        f"working set {pressure['working_set_bytes'] / 2**20:.0f} MiB in a budget of "
        f"{args.budget_mib} MiB: {pressure['tasks']} tasks in "
        f"{pressure['seconds']:.2f} s, {pressure['evictions']} evictions, "
        f"{pressure['written_back_bytes'] / 2**20:.0f} MiB written back, results "
        f"{'exact' if pressure['results_exact'] else 'WRONG'}"
    )
    contexts = many_contexts(stf, args.backend, args.contexts)
    print(
        f"{contexts['contexts']} contexts in {contexts['seconds']:.2f} s: device memory "
        f"{contexts['device_bytes_before']} -> {contexts['device_bytes_after']} bytes, "
        f"threads {contexts['threads_before']} -> {contexts['threads_after']}"
    )
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"pressure": pressure, "contexts": contexts}, out, indent=2)


if __name__ == "__main__":
    main()
