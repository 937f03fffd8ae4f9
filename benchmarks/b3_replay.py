"""B3: replay of recorded work against raw CUDA graphs.

    python benchmarks/b3_replay.py [--nodes 1000] [--launches 100] [--iterations 1000]
                                   [--json out.json]

1. A ``task_graph()`` recording of a chain of ``nodes`` tasks (one ``rw`` dependency,
   one empty kernel each), launched ``launches`` times, against a raw graph of the same
   kernels built with ``cuGraphAddKernelNode`` (``_cuda_graph_raw.chain_replay``).
2. A ``while_loop`` of ``iterations`` iterations whose body is one task launching an
   empty kernel and a condition task launching the raw baseline's step kernel on
   ``loop.cond_handle`` (decrement a device counter, ``cudaGraphSetConditional``),
   recorded once in a ``launchable_graph_scope`` (a fill resets the counter) and
   launched ``launches`` times, against the raw graph with the same two kernels and a
   conditional node (``_cuda_graph_raw.while_loop_replay``); and the same loop ending
   with ``continue_while(counter > 0)`` (stflow's own condition kernel) instead.

Times: first launch to completion of the last, median of the repeats. Target: ≤ 1.1×
the raw replay.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import time
from typing import Any

import numpy as np
from _cuda import check, compile_empty_kernel, driver
from _cuda_graph_raw import STEP_SOURCE, _compile, chain_replay, while_loop_replay


def _timed(launch: Any, stream: int, launches: int, repeats: int) -> float:
    cu = driver()
    handle = cu.CUstream(stream)
    launch()
    check(cu.cuStreamSynchronize(handle))  # warm up
    totals = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(launches):
            launch()
        check(cu.cuStreamSynchronize(handle))
        totals.append(time.perf_counter() - start)
    return statistics.median(totals)


def stflow_chain(nodes: int, launches: int, repeats: int) -> float:
    import stflow as stf

    function = compile_empty_kernel()
    cu_launch = driver().cuLaunchKernel
    graph = stf.task_graph(backend="cuda")
    x = graph.context.logical_data(np.zeros(16))
    with graph:
        for _ in range(nodes):
            with graph.context.task(x.rw()) as t:
                cu_launch(function, 1, 1, 1, 1, 1, 1, 0, int(t.stream_ptr()), 0, 0)
    total = _timed(graph.launch, graph.stream, launches, repeats)
    graph.finalize()
    return total / launches * 1e6


def stflow_while(iterations: int, launches: int, repeats: int, custom: bool) -> float:
    import stflow as stf

    cu = driver()
    empty = compile_empty_kernel()
    step = _compile(STEP_SOURCE, "step", 0)
    with stf.stackable_context(backend="cuda") as sctx:
        x = sctx.logical_data(np.zeros(16))
        counter = sctx.logical_data_empty((1,), np.int32 if custom else np.int64)
        with sctx.launchable_graph_scope() as lg:
            with sctx.task(counter.write()) as t:
                check(
                    cu.cuMemsetD32Async(
                        t.get_arg(0), iterations, 1, cu.CUstream(int(t.stream_ptr()))
                    )
                )
            with sctx.while_loop() as loop:
                with sctx.task(x.rw()) as t:
                    cu.cuLaunchKernel(
                        empty, 1, 1, 1, 1, 1, 1, 0, int(t.stream_ptr()), 0, 0
                    )
                if custom:
                    handle = loop.cond_handle
                    with loop.condition_task(counter.rw()) as t:
                        args = [ctypes.c_uint64(handle), ctypes.c_uint64(t.get_arg(0))]
                        array = (ctypes.c_void_p * 2)(
                            *[ctypes.addressof(a) for a in args]
                        )
                        check(
                            cu.cuLaunchKernel(
                                step,
                                1,
                                1,
                                1,
                                1,
                                1,
                                1,
                                0,
                                int(t.stream_ptr()),
                                ctypes.addressof(array),
                                0,
                            )
                        )
                else:
                    with sctx.task(counter.rw()) as t:
                        from stflow.interop.cupy import as_cupy, cupy_stream

                        with cupy_stream(t.stream_ptr()):
                            as_cupy(t.get_arg_cai(0))[...] -= 1
                    loop.continue_while(counter > 0)
            total = _timed(lg.launch, lg.stream, launches, repeats)
    return total / (launches * iterations) * 1e6


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--launches", type=int, default=100)
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    rows: dict[str, Any] = {}
    raw = chain_replay(args.nodes, args.launches, args.repeats)["us_per_launch"]
    ours = stflow_chain(args.nodes, args.launches, args.repeats)
    rows["chain"] = {
        "stflow_us_per_launch": ours,
        "raw_us_per_launch": raw,
        "ratio": ours / raw,
    }
    print(
        f"task_graph replay, {args.nodes}-task chain: {ours:.1f} µs vs raw {raw:.1f} "
        f"µs per launch = {ours / raw:.3f}× (target ≤ 1.1)"
    )
    loop_launches = max(1, args.launches // 10)
    raw = while_loop_replay(args.iterations, loop_launches, args.repeats)[
        "us_per_iteration"
    ]
    for name, custom in (("while_cond_handle", True), ("while_continue_while", False)):
        ours = stflow_while(args.iterations, loop_launches, args.repeats, custom)
        rows[name] = {
            "stflow_us_per_iteration": ours,
            "raw_us_per_iteration": raw,
            "ratio": ours / raw,
        }
        print(
            f"{name}: {ours:.3f} µs vs raw {raw:.3f} µs per iteration = {ours / raw:.3f}×"
        )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=2)
    return rows


if __name__ == "__main__":
    main()
