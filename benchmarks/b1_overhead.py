"""B1: per-task overhead in stream mode against the raw cuda.bindings loop.

    python benchmarks/b1_overhead.py [--tasks 5000] [--repeats 7] [--json out.json]

Each task launches one empty kernel with ``cuLaunchKernel`` on the task's stream.
Workloads: a chain with one ``rw`` dependency; the chain plus 1 and 3 ``read``
dependencies; independent tasks round-robin over 8 logical data. The baseline, in the
same process, is the raw loop doing what a task needs at least: one
``cuStreamWaitEvent`` per dependency, ``cuLaunchKernel`` and ``cuEventRecord``.
Reported: host submission time per task and time to completion, medians of the
repeats; ratios stflow / raw as the median of paired runs (stflow and raw alternate).
Targets: ≤ 1.3× for the 1-dependency chain, ≤ 1 µs per extra dependency.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
from _cuda import check, compile_empty_kernel, driver


def raw_loop(function, tasks: int, deps: int) -> tuple[float, float]:
    cu = driver()
    stream = check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING))
    other = check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING))
    flags = cu.CUevent_flags.CU_EVENT_DISABLE_TIMING
    events = [check(cu.cuEventCreate(flags)) for _ in range(deps + 1)]
    for event in events:
        check(cu.cuEventRecord(event, other))
    check(cu.cuCtxSynchronize())
    launch, record, wait = cu.cuLaunchKernel, cu.cuEventRecord, cu.cuStreamWaitEvent
    start = time.perf_counter()
    for _ in range(tasks):
        for event in events[1:]:
            wait(stream, event, 0)
        wait(stream, events[0], 0)
        launch(function, 1, 1, 1, 1, 1, 1, 0, stream, 0, 0)
        record(events[0], stream)
    submitted = time.perf_counter()
    check(cu.cuStreamSynchronize(stream))
    done = time.perf_counter()
    for event in events:
        check(cu.cuEventDestroy(event))
    check(cu.cuStreamDestroy(stream))
    check(cu.cuStreamDestroy(other))
    return submitted - start, done - start


def stflow_chain(function, tasks: int, deps: int) -> tuple[float, float]:
    import stflow as stf

    cu = driver()
    launch = cu.cuLaunchKernel
    with stf.context(backend="cuda") as ctx:
        x = ctx.logical_data(np.zeros(16))
        inputs = [ctx.logical_data(np.zeros(16)) for _ in range(deps)]
        ctx.wait(x)
        for i in inputs:
            ctx.wait(i)
        deps_of = [x.rw(), *[i.read() for i in inputs]]
        start = time.perf_counter()
        for _ in range(tasks):
            with ctx.task(*deps_of) as t:
                launch(function, 1, 1, 1, 1, 1, 1, 0, int(t.stream_ptr()), 0, 0)
        submitted = time.perf_counter()
    return submitted - start, time.perf_counter() - start


def stflow_independent(function, tasks: int, _deps: int) -> tuple[float, float]:
    import stflow as stf

    cu = driver()
    launch = cu.cuLaunchKernel
    with stf.context(backend="cuda") as ctx:
        data = [ctx.logical_data(np.zeros(16)) for _ in range(8)]
        deps_of = [d.rw() for d in data]
        start = time.perf_counter()
        for i in range(tasks):
            with ctx.task(deps_of[i % 8]) as t:
                launch(function, 1, 1, 1, 1, 1, 1, 0, int(t.stream_ptr()), 0, 0)
        submitted = time.perf_counter()
    return submitted - start, time.perf_counter() - start


def measure(fn, function, tasks: int, deps: int, repeats: int) -> dict:
    """stflow and the raw loop in alternation, so that both see the same machine
    (virtual machines drift); medians of the times and of the paired ratios."""
    fn(function, tasks // 10, deps)  # warm up
    raw_loop(function, tasks // 10, deps)
    ours, raw = [], []
    for _ in range(repeats):
        ours.append(fn(function, tasks, deps))
        raw.append(raw_loop(function, tasks, deps))

    def us(runs: list, index: int) -> float:
        return statistics.median(r[index] for r in runs) / tasks * 1e6

    return {
        "stflow": {"submit_us": us(ours, 0), "total_us": us(ours, 1)},
        "raw": {"submit_us": us(raw, 0), "total_us": us(raw, 1)},
        "ratio_submit": statistics.median(o[0] / r[0] for o, r in zip(ours, raw)),
        "ratio_total": statistics.median(o[1] / r[1] for o, r in zip(ours, raw)),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also print where the time of the 1-dependency chain goes",
    )
    args = parser.parse_args(argv)
    function = compile_empty_kernel()
    if args.profile:
        import cProfile
        import pstats

        stflow_chain(function, 1000, 0)
        cProfile.runctx(
            "stflow_chain(function, args.tasks, 0)",
            globals(),
            {"function": function, "args": args},
            "/tmp/stflow-b1.prof",
        )
        pstats.Stats("/tmp/stflow-b1.prof").sort_stats("tottime").print_stats(22)
    rows = {}
    workloads = (
        ("chain_1dep", stflow_chain, 0),
        ("chain_2deps", stflow_chain, 1),
        ("chain_4deps", stflow_chain, 3),
        ("independent_8", stflow_independent, 0),
    )
    for _, fn, deps in workloads:  # warm the process up (event pools, caches)
        fn(function, args.tasks, deps)
        raw_loop(function, args.tasks, deps)
    for name, fn, deps in workloads:
        rows[name] = measure(fn, function, args.tasks, deps, args.repeats)
    print(
        f"{'workload':<16}{'stflow µs':>11}{'raw µs':>9}{'ratio':>8}   (submission; "
        "medians; the ratio of paired runs; completion in the JSON)"
    )
    for name, row in rows.items():
        print(
            f"{name:<16}{row['stflow']['submit_us']:>11.2f}{row['raw']['submit_us']:>9.2f}"
            f"{row['ratio_submit']:>8.2f}"
        )
    extra = (
        rows["chain_4deps"]["stflow"]["submit_us"]
        - rows["chain_1dep"]["stflow"]["submit_us"]
    ) / 3
    rows["extra_dependency_us"] = extra
    print(
        f"cost per extra dependency: {extra:.2f} µs (target ≤ 1 µs); "
        f"1-dep chain ratio {rows['chain_1dep']['ratio_submit']:.2f} (target ≤ 1.3)"
    )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=2)
    return rows


if __name__ == "__main__":
    main()
