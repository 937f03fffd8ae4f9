"""Long-lived captures (for B2): can several streams capture into one graph at once,
depending on each other's nodes, and is a capture point (cuStreamGetCaptureInfo)
cheap while the capture grows?

    python benchmarks/capture_long.py
"""

from __future__ import annotations

import time

from _cuda import check, compile_empty_kernel, driver


def main() -> None:
    cu = driver()
    function = compile_empty_kernel()
    flags = int(cu.CUstream_flags.CU_STREAM_NON_BLOCKING)
    s1 = check(cu.cuStreamCreate(flags))
    s2 = check(cu.cuStreamCreate(flags))
    relaxed = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    add = cu.CUstreamUpdateCaptureDependencies_flags.CU_STREAM_ADD_CAPTURE_DEPENDENCIES
    info = getattr(cu, "cuStreamGetCaptureInfo_v3", None) or cu.cuStreamGetCaptureInfo
    update = (
        getattr(cu, "cuStreamUpdateCaptureDependencies_v2", None)
        or cu.cuStreamUpdateCaptureDependencies
    )
    # (a) two concurrent captures into one graph, s2 depending on a node of s1's
    graph = check(cu.cuGraphCreate(0))
    steps = [
        (
            "begin s1",
            lambda: cu.cuStreamBeginCaptureToGraph(s1, graph, [], None, 0, relaxed),
        ),
        (
            "begin s2",
            lambda: cu.cuStreamBeginCaptureToGraph(s2, graph, [], None, 0, relaxed),
        ),
        ("launch s1", lambda: cu.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, s1, 0, 0)),
        ("point s1", lambda: info(s1)),
        ("launch s2", lambda: cu.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, s2, 0, 0)),
    ]
    point: list = []
    for name, step in steps:
        result = step()
        print(f"(a) {name}: {result[0]!r}")
        if name == "point s1" and not result[0]:
            point = list(result[3][: result[-1]])
    result = update(s2, point, None, len(point), int(add))
    print(f"(a) s2 depends on s1's node: {result[0]!r}")
    for stream in (s1, s2):
        print(f"(a) end: {cu.cuStreamEndCapture(stream)[0]!r}")
    s1 = check(cu.cuStreamCreate(flags))
    # (b) one long capture: the cost of a capture point as the capture grows
    graph = check(cu.cuGraphCreate(0))
    check(cu.cuStreamBeginCaptureToGraph(s1, graph, [], None, 0, relaxed))
    marks = {1000, 10000, 30000}
    start = time.perf_counter()
    for n in range(1, 30001):
        cu.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, s1, 0, 0)
        info(s1)
        if n + 100 in marks:
            start = time.perf_counter()
        if n in marks:
            print(
                f"(b) {n:>6} nodes: {(time.perf_counter() - start) / 100 * 1e6:7.2f} µs "
                "per launch + capture point"
            )
    start = time.perf_counter()
    check(cu.cuStreamEndCapture(s1))
    print(
        f"(b) end of the 30000-node capture: {(time.perf_counter() - start) * 1e3:.1f} ms"
    )
    start = time.perf_counter()
    check(cu.cuGraphInstantiate(graph, 0))
    print(
        f"(b) instantiate 30000 kernel nodes: {(time.perf_counter() - start) * 1e3:.1f} ms"
    )


if __name__ == "__main__":
    main()
