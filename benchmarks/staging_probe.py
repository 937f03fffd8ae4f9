"""What decides STFLOW_PIN_LIMIT, measured with raw cuda.bindings (no stflow runtime):

    python benchmarks/staging_probe.py

The 136 lower tiles (2048 x 2048 fp64, 4.25 GiB) of a 32768 x 32768 matrix (8 GiB)
moved to the device and back: host threads gathering tiles into pinned buffers
(1-16 threads); the matrix page-locked in place, then one pitched copy per tile;
staged through pinned buffers filled by a thread pool, the stream waiting on flags in
pinned memory (``cuStreamWaitValue32``), as ``stflow/backends/_cuda_staging.py``
does; staged back one drain at a time (a host callback hands each drain to the pool,
the stream waits for its flag); and the driver's own pageable 2-D copies from several
threads. Needs one GPU and about 14 GiB of host memory. Figures: RESULTS.md, "Staged
copies of pageable arrays".
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from cuda.bindings import driver as d

N, NB = 32768, 2048
TILES = [(i, j) for i in range(N // NB) for j in range(i + 1)]
TILE_BYTES = NB * NB * 8
BUFFERS = 16
GEQ = int(d.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ)


def ck(result: Any) -> Any:
    """The value of a cuda.bindings call, raising on an error."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != d.CUresult.CUDA_SUCCESS:
        raise RuntimeError(str(err))
    return rest[0] if len(rest) == 1 else rest


def pinned_view(ptr: int, shape: tuple[int, ...], dtype: Any = np.float64) -> np.ndarray:
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return np.frombuffer((ctypes.c_byte * nbytes).from_address(ptr), dtype).reshape(shape)


class Probe:
    def __init__(self) -> None:
        ck(d.cuInit(0))
        ck(d.cuCtxSetCurrent(ck(d.cuDevicePrimaryCtxRetain(ck(d.cuDeviceGet(0))))))
        self.a = np.empty((N, N))
        self.a.fill(1.5)
        self.base = self.a.__array_interface__["data"][0]
        self.device = [int(ck(d.cuMemAlloc(TILE_BYTES))) for _ in TILES]
        self.stream = ck(d.cuStreamCreate(1))
        flags = d.CU_MEMHOSTALLOC_PORTABLE
        self.buffers = [
            int(ck(d.cuMemHostAlloc(TILE_BYTES, flags))) for _ in range(BUFFERS)
        ]
        self.views = [pinned_view(b, (NB, NB)) for b in self.buffers]
        flag_page = int(ck(d.cuMemHostAlloc(4096, flags | d.CU_MEMHOSTALLOC_DEVICEMAP)))
        self.flags = pinned_view(flag_page, (1024,), np.uint32)
        self.flags_device = int(ck(d.cuMemHostGetDevicePointer(flag_page, 0)))

    def tile(self, index: int) -> np.ndarray:
        i, j = TILES[index % len(TILES)]
        return self.a[i * NB : (i + 1) * NB, j * NB : (j + 1) * NB]

    def tile_ptr(self, index: int) -> int:
        i, j = TILES[index]
        return self.base + (i * NB * N + j * NB) * 8

    def gather(self, buffer: int, index: int) -> None:
        np.copyto(self.views[buffer], self.tile(index))

    def scatter(self, buffer: int, index: int) -> None:
        np.copyto(self.tile(index), self.views[buffer])

    def copy_2d(
        self, dst: int, dst_pitch: int, src: int, src_pitch: int, stream: Any
    ) -> None:
        c = d.CUDA_MEMCPY2D()
        c.srcMemoryType = c.dstMemoryType = d.CUmemorytype.CU_MEMORYTYPE_UNIFIED
        c.srcDevice, c.dstDevice, c.srcPitch, c.dstPitch = src, dst, src_pitch, dst_pitch
        c.WidthInBytes, c.Height = NB * 8, NB
        ck(d.cuMemcpy2DAsync(c, stream))

    def host_bandwidth(self) -> None:
        jobs = 64
        for name, work in (("gather", self.gather), ("scatter", self.scatter)):
            for threads in (1, 4, 8, 16):
                with ThreadPoolExecutor(threads) as pool:
                    t = time.perf_counter()
                    list(pool.map(lambda x, w=work: w(x % BUFFERS, x), range(jobs)))
                    seconds = time.perf_counter() - t
                print(
                    f"{name} {threads:2d} threads: {jobs * TILE_BYTES / seconds / 1e9:6.1f} GB/s"
                )

    def registered(self) -> None:
        t = time.perf_counter()
        ck(d.cuMemHostRegister(self.base, self.a.nbytes, d.CU_MEMHOSTREGISTER_PORTABLE))
        register = time.perf_counter() - t
        for k in range(len(TILES)):
            self.copy_2d(self.device[k], NB * 8, self.tile_ptr(k), N * 8, self.stream)
        ck(d.cuStreamSynchronize(self.stream))
        into = time.perf_counter() - t
        t = time.perf_counter()
        for k in range(len(TILES)):
            self.copy_2d(self.tile_ptr(k), N * 8, self.device[k], NB * 8, self.stream)
        ck(d.cuStreamSynchronize(self.stream))
        back = time.perf_counter() - t
        t = time.perf_counter()
        ck(d.cuMemHostUnregister(self.base))
        print(
            f"registered: register {register:.3f} s, in (incl. register) {into:.3f} s, "
            f"out {back:.3f} s, unregister {time.perf_counter() - t:.3f} s"
        )

    def staged(self, threads: int, buffers: int, to_device: bool, stream: Any) -> float:
        """Every tile through ``buffers`` pinned buffers, the stream waiting on their
        flags: gathers posted at once (in), or drains posted by a host callback after
        each copy into its buffer (out)."""
        self.flags[:] = 0
        free: list[Any] = [None] * buffers
        pool = ThreadPoolExecutor(threads)

        def job(work: Callable[[int, int], None], k: int, index: int, value: int) -> None:
            work(k, index)
            self.flags[k] = value

        t = time.perf_counter()
        for index in range(len(TILES)):
            k, value = index % buffers, index // buffers + 1
            if free[k] is not None:
                ck(d.cuEventSynchronize(free[k]))
                ck(d.cuEventDestroy(free[k]))
            if to_device:
                pool.submit(job, self.gather, k, index, value)
                ck(d.cuStreamWaitValue32(stream, self.flags_device + 4 * k, value, GEQ))
                ck(
                    d.cuMemcpyAsync(
                        self.device[index], self.buffers[k], TILE_BYTES, stream
                    )
                )
            else:
                ck(
                    d.cuMemcpyAsync(
                        self.buffers[k], self.device[index], TILE_BYTES, stream
                    )
                )
                self.host_func(stream, pool, job, k, index, value)
                ck(d.cuStreamWaitValue32(stream, self.flags_device + 4 * k, value, GEQ))
            free[k] = ck(d.cuEventCreate(2))
            ck(d.cuEventRecord(free[k], stream))
        ck(d.cuStreamSynchronize(stream))
        seconds = time.perf_counter() - t
        pool.shutdown()
        for event in free:
            if event is not None:
                ck(d.cuEventDestroy(event))
        return seconds

    def host_func(
        self, stream: Any, pool: Any, job: Any, k: int, index: int, value: int
    ) -> None:
        """A host callback (stflow's, which keeps the Python callable alive) that hands
        the drain of buffer ``k`` to the pool."""
        from stflow.backends import get_backend

        backend = get_backend("cuda")
        wrapped = backend.stream_from_handle(int(stream))
        backend.launch_host_func(
            wrapped, lambda: pool.submit(job, self.scatter, k, index, value) and None
        )

    def driver_pageable(self) -> None:
        for threads in (1, 4, 8):
            streams = [ck(d.cuStreamCreate(1)) for _ in range(threads)]

            def copy(index: int, streams: list[Any] = streams) -> None:
                c = d.CUDA_MEMCPY2D()
                c.srcMemoryType = d.CUmemorytype.CU_MEMORYTYPE_HOST
                c.dstMemoryType = d.CUmemorytype.CU_MEMORYTYPE_DEVICE
                c.srcHost, c.dstDevice = self.tile_ptr(index), self.device[index]
                c.srcPitch, c.dstPitch = N * 8, NB * 8
                c.WidthInBytes, c.Height = NB * 8, NB
                ck(d.cuMemcpy2DAsync(c, streams[index % len(streams)]))

            t = time.perf_counter()
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(copy, range(len(TILES))))
            for s in streams:
                ck(d.cuStreamSynchronize(s))
            seconds = time.perf_counter() - t
            print(
                f"driver pageable 2D in: {threads} threads: {seconds:.3f} s "
                f"({len(TILES) * TILE_BYTES / seconds / 1e9:.1f} GB/s)"
            )


def main() -> int:
    probe = Probe()
    total = len(TILES) * TILE_BYTES
    print(f"{len(TILES)} tiles of {TILE_BYTES >> 20} MiB, {total / 2**30:.2f} GiB")
    probe.host_bandwidth()
    probe.registered()
    for threads in (4, 8, 16):
        for buffers in (8, 16):
            seconds = probe.staged(threads, buffers, True, probe.stream)
            print(
                f"staged in: {threads:2d} threads, {buffers} buffers: {seconds:.3f} s "
                f"({total / seconds / 1e9:.1f} GB/s)"
            )
    print("staged data ok:", all(bool(np.all(v[:4, :4] == 1.5)) for v in probe.views[:4]))
    for threads in (4, 8, 16):
        seconds = probe.staged(threads, BUFFERS, False, probe.stream)
        print(
            f"staged out: {threads:2d} threads: {seconds:.3f} s ({total / seconds / 1e9:.1f} GB/s)"
        )
    probe.driver_pageable()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
