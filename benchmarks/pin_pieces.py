"""Page-locking a large NumPy matrix whole or in pieces, on one thread or several.

    python benchmarks/pin_pieces.py [--n 32768] [--pieces 16 64] [--threads 1 4 16]

What ``STFLOW_PIN_PIECE`` decides (``stflow/backends/_registrations.py``): an n × n
float64 matrix (8 GiB at n = 32768, its pages already touched, as a user's matrix is)
is page-locked with ``cuMemHostRegister`` whole, then as ``--pieces`` page-aligned
registrations locked by ``--threads`` threads at once; each then unregistered. Also: how
long driver calls on another thread wait while the matrix is locked whole, and that a
pitched copy across two registrations is refused while the same copy cut at the
boundary (as stflow cuts it) moves the tile exactly. Raw ``cuda.bindings`` only.
"""

from __future__ import annotations

import argparse
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from _cuda import check, driver

PAGE = 4096


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=32768)
    parser.add_argument("--pieces", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 4, 16])
    args = parser.parse_args(argv)
    cu = driver()
    check(cu.cuInit(0))
    context = check(cu.cuDevicePrimaryCtxRetain(check(cu.cuDeviceGet(0))))
    check(cu.cuCtxSetCurrent(context))
    stream = check(cu.cuStreamCreate(1))
    a = np.full((args.n, args.n), 1.5)
    ptr, nbytes = a.ctypes.data, a.nbytes
    flags = cu.CU_MEMHOSTREGISTER_PORTABLE
    print(f"matrix {nbytes / 2**30:.2f} GiB, data {ptr % PAGE} bytes into a page")

    def lock(part: tuple[int, int]) -> None:
        check(cu.cuCtxSetCurrent(context))
        check(cu.cuMemHostRegister(part[0], part[1], flags))

    def unlock(part: tuple[int, int]) -> None:
        check(cu.cuCtxSetCurrent(context))
        check(cu.cuMemHostUnregister(part[0]))

    def timed(parts: list[tuple[int, int]], threads: int) -> tuple[float, float]:
        with ThreadPoolExecutor(threads) as pool:
            start = time.perf_counter()
            list(pool.map(lock, parts))
            locked = time.perf_counter() - start
            start = time.perf_counter()
            list(pool.map(unlock, parts))
            return locked, time.perf_counter() - start

    locked, unlocked = timed([(ptr, nbytes)], 1)
    print(f"whole: lock {locked:.3f} s, unlock {unlocked:.3f} s")
    from stflow.backends._registrations import pieces

    for count in args.pieces:
        parts = pieces(ptr, nbytes, -(-nbytes // count), PAGE)
        for threads in args.threads:
            locked, unlocked = timed(parts, threads)
            print(
                f"{len(parts)} pieces on {threads} thread(s): lock {locked:.3f} s, "
                f"unlock {unlocked:.3f} s"
            )

    # Driver calls on this thread while another locks the whole matrix.
    event = check(cu.cuEventCreate(2))
    latencies = []
    worker = threading.Thread(target=lock, args=((ptr, nbytes),))
    worker.start()
    while worker.is_alive():
        start = time.perf_counter()
        cu.cuEventRecord(event, stream)
        latencies.append(time.perf_counter() - start)
    worker.join()
    check(cu.cuStreamSynchronize(stream))
    unlock((ptr, nbytes))
    us = np.array(latencies) * 1e6
    print(
        f"event records while another thread locks: {len(us)} calls, median "
        f"{np.median(us):.1f} µs, max {us.max():.0f} µs"
    )

    # A tile across two registrations: refused whole, exact when cut.
    from stflow.backends._registrations import split_rows

    nb = 2048
    row = args.n * 8
    parts = pieces(ptr, nbytes, nbytes // 2, PAGE)
    cut = parts[1][0]
    first_row = max(0, (cut - ptr) // row - nb // 2)
    column = max(0, min(args.n - nb, (cut - ptr) % row // 8 - nb // 2))
    origin = ptr + first_row * row + column * 8  # a tile the boundary crosses
    device = int(check(cu.cuMemAlloc(nb * nb * 8)))  # a CUdeviceptr: no arithmetic
    for part in parts:
        lock(part)

    def copy2d(dst: int, src: int, width: int, height: int, pitch: int) -> object:
        m = cu.CUDA_MEMCPY2D()
        m.srcMemoryType = m.dstMemoryType = cu.CUmemorytype.CU_MEMORYTYPE_UNIFIED
        m.srcDevice, m.srcPitch = src, pitch
        m.dstDevice, m.dstPitch = dst, nb * 8
        m.WidthInBytes, m.Height = width, height
        return cu.cuMemcpy2DAsync(m, stream)[0]

    print(
        "a pitched copy across two registrations:",
        copy2d(device, origin, nb * 8, nb, row),
    )
    for first, rows, offset, size in split_rows(origin, row, nb * 8, nb, [cut]):
        dst = device + first * nb * 8 + offset
        src = origin + first * row + offset
        check(copy2d(dst, src, size, rows, row))
    back = np.empty((nb, nb))
    check(cu.cuMemcpyDtoH(back.ctypes.data, device, back.nbytes))
    exact = np.array_equal(back, a[first_row : first_row + nb, column : column + nb])
    print(f"the same copy cut at the boundary: exact {exact}")
    for part in parts:
        unlock(part)
    check(cu.cuMemFree(device))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
