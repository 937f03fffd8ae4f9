"""Host time of one cuSOLVER / cuBLAS call through ``stflow.linalg``, alone and behind
queued work (CUDA, one device).

    python benchmarks/library_host_time.py [--n 2048]

Tells whether a library call holds the host until the work queued before it has run:
``potrf``, ``trsm`` and ``gemm`` on ``n × n`` matrices are timed on the host with the
device idle (best of 3), then once behind about 150 ms of queued matrix products on
the same stream. A call that waits for queued work takes the queue's time; one that
does not takes about its idle time. (The tiled Cholesky's profile shows seconds inside
these calls: this separates the library's own launch cost from a full launch queue.)
"""

from __future__ import annotations

import argparse
import time

from stflow import linalg


def _host_ms(call) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2048)
    args = parser.parse_args()
    import cupy

    n = args.n
    a = cupy.random.rand(n, n)
    spd = a @ a.T + n * cupy.eye(n)
    b = cupy.random.rand(n, n)
    big = cupy.random.rand(8192, 8192)
    out = cupy.empty_like(big)
    sync = cupy.cuda.Device().synchronize

    def queue() -> None:  # about 150 ms of work on an H100
        for _ in range(8):
            cupy.matmul(big, big, out=out)

    calls = {
        "potrf": lambda: linalg.potrf(spd.copy()),
        "trsm": lambda: linalg.trsm(spd, b, side="right", trans=True),
        "gemm": lambda: linalg.gemm(b, b, b.copy(), trans_b=True),
    }
    for name, call in calls.items():
        call()
        sync()
        idle = min(_host_ms(call) for _ in range(3))
        sync()
        queue()
        start = time.perf_counter()
        sync()
        queued = (time.perf_counter() - start) * 1e3
        queue()
        behind = _host_ms(call)
        sync()
        print(
            f"{name}: host time {idle:.2f} ms alone, {behind:.2f} ms behind "
            f"~{queued:.0f} ms of queued work"
        )


if __name__ == "__main__":
    main()
