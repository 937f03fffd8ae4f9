"""How the cost of one capture into a graph grows with the graph (for B2).

    python benchmarks/capture_scaling.py

(a) ``cuStreamBeginCaptureToGraph`` into the growing graph, one kernel,
``cuStreamGetCaptureInfo``, ``cuStreamEndCapture``; (b) a capture into a fresh graph,
added to the growing graph with ``cuGraphAddChildGraphNode``; (c) ``cuGraphAddKernelNode``
straight into the growing graph. µs per operation at several graph sizes.
"""

from __future__ import annotations

import time

from _cuda import check, compile_empty_kernel, driver


def main() -> None:
    cu = driver()
    function = compile_empty_kernel()
    stream = check(cu.cuStreamCreate(int(cu.CUstream_flags.CU_STREAM_NON_BLOCKING)))
    relaxed = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    params = cu.CUDA_KERNEL_NODE_PARAMS()
    params.func = function
    params.gridDimX = params.gridDimY = params.gridDimZ = 1
    params.blockDimX = params.blockDimY = params.blockDimZ = 1
    for name in ("to_graph", "child", "add_kernel"):
        graph = check(cu.cuGraphCreate(0))
        deps: list = []
        marks = {1000, 10000, 30000}
        start = time.perf_counter()
        for n in range(1, 30001):
            if name == "to_graph":
                check(
                    cu.cuStreamBeginCaptureToGraph(
                        stream, graph, deps, None, len(deps), relaxed
                    )
                )
                cu.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, 0, 0)
                info = check(cu.cuStreamGetCaptureInfo(stream))
                deps = list(info[3][: info[-1]])
                check(cu.cuStreamEndCapture(stream))
            elif name == "child":
                check(cu.cuStreamBeginCapture(stream, relaxed))
                cu.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, 0, 0)
                child = check(cu.cuStreamEndCapture(stream))
                node = check(cu.cuGraphAddChildGraphNode(graph, deps, len(deps), child))
                check(cu.cuGraphDestroy(child))
                deps = [node]
            else:
                node = check(cu.cuGraphAddKernelNode(graph, deps, len(deps), params))
                deps = [node]
            if n in marks or n == 100:
                now = time.perf_counter()
                if n != 100:
                    print(
                        f"{name:<11} nodes {n:>6}: {(now - start) / 100 * 1e6:8.2f} µs "
                        "per op (last 100)"
                    )
            if n + 100 in marks:
                start = time.perf_counter()
        check(cu.cuGraphDestroy(graph))


if __name__ == "__main__":
    main()
