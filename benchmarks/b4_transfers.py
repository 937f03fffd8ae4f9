"""B4: data movement — bandwidth against raw pinned copies, and pipeline overlap.

    python benchmarks/b4_transfers.py [--gib 1] [--chunks 16] [--repeats 5] [--json out]

1. A ``--gib`` GiB NumPy array registered as logical data and read by a device task:
   achieved host→device GB/s (task submission to completion, registration excluded)
   against a raw ``cuMemcpyHtoDAsync`` from pinned memory of the same size, in the same
   run. Target ≥ 0.9×.
2. A pipeline of ``--chunks`` chunks of that array: host → device task (scale in
   place) → host (write-back at finalize). Compared with the slowest stage measured
   alone (all H2D copies, all kernels, all D2H copies): overlap = slowest stage /
   pipeline time. Target ≥ 90%.
3. The same pipeline written by hand with raw ``cuda.bindings`` (pinned memory,
   chunk k copied in on one stream, scaled and copied out on another once its copy-in
   has landed), and both directions of the whole array at once (H2D and D2H on two
   streams): what the link gives when both directions move together. A PCIe link does
   not carry both directions at full speed at once, so the slowest stage alone is a
   bound the hardware itself misses; ``stflow / hand-written`` says how close the
   runtime comes to the best a program can do.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
from _cuda import check, driver


def raw_h2d(nbytes: int, repeats: int) -> tuple[float, float]:
    """Seconds for one pinned H2D and one D2H copy of ``nbytes`` (medians)."""
    cu = driver()
    host = check(cu.cuMemHostAlloc(nbytes, 0))
    device = check(cu.cuMemAlloc(nbytes))
    stream = check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING))
    h2d, d2h = [], []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        check(cu.cuMemcpyHtoDAsync(device, host, nbytes, stream))
        check(cu.cuStreamSynchronize(stream))
        middle = time.perf_counter()
        check(cu.cuMemcpyDtoHAsync(host, device, nbytes, stream))
        check(cu.cuStreamSynchronize(stream))
        h2d.append(middle - start)
        d2h.append(time.perf_counter() - middle)
    check(cu.cuStreamDestroy(stream))
    check(cu.cuMemFree(device))
    check(cu.cuMemFreeHost(host))
    return statistics.median(h2d[1:]), statistics.median(d2h[1:])


def raw_duplex(nbytes: int, repeats: int) -> float:
    """Seconds for an H2D and a D2H copy of ``nbytes`` each, at once on two streams
    (pinned host memory, median)."""
    cu = driver()
    hosts = [check(cu.cuMemHostAlloc(nbytes, 0)) for _ in range(2)]
    devices = [check(cu.cuMemAlloc(nbytes)) for _ in range(2)]
    flags = cu.CUstream_flags.CU_STREAM_NON_BLOCKING
    up, down = (check(cu.cuStreamCreate(flags)) for _ in range(2))
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        check(cu.cuMemcpyHtoDAsync(devices[0], hosts[0], nbytes, up))
        check(cu.cuMemcpyDtoHAsync(hosts[1], devices[1], nbytes, down))
        check(cu.cuStreamSynchronize(up))
        check(cu.cuStreamSynchronize(down))
        times.append(time.perf_counter() - start)
    for stream in (up, down):
        check(cu.cuStreamDestroy(stream))
    for device in devices:
        check(cu.cuMemFree(device))
    for host in hosts:
        check(cu.cuMemFreeHost(host))
    return statistics.median(times[1:])


def raw_pipeline(nbytes: int, chunks: int, repeats: int) -> float:
    """Seconds for the pipeline written by hand: chunk k copied in on one stream,
    then (after an event) scaled by CuPy and copied out on a second stream; host
    memory pinned, device memory allocated before the clock starts (median)."""
    import cupy

    cu = driver()
    piece = nbytes // chunks
    host = check(cu.cuMemHostAlloc(nbytes, 0))
    device = check(cu.cuMemAlloc(nbytes))
    flags = cu.CUstream_flags.CU_STREAM_NON_BLOCKING
    up, out = (check(cu.cuStreamCreate(flags)) for _ in range(2))
    landed = [
        check(cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING))
        for _ in range(chunks)
    ]
    memory = cupy.cuda.UnownedMemory(int(device), nbytes, None)
    whole = cupy.ndarray((nbytes // 8,), cupy.float64, cupy.cuda.MemoryPointer(memory, 0))
    views = [whole[k * piece // 8 : (k + 1) * piece // 8] for k in range(chunks)]
    stream = cupy.cuda.ExternalStream(int(out))
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        for k in range(chunks):
            offset = k * piece
            check(cu.cuMemcpyHtoDAsync(int(device) + offset, host + offset, piece, up))
            check(cu.cuEventRecord(landed[k], up))
            check(cu.cuStreamWaitEvent(out, landed[k], 0))
            with stream:
                views[k] *= 2.0
            check(cu.cuMemcpyDtoHAsync(host + offset, int(device) + offset, piece, out))
        check(cu.cuStreamSynchronize(out))
        times.append(time.perf_counter() - start)
    for event in landed:
        check(cu.cuEventDestroy(event))
    for handle in (up, out):
        check(cu.cuStreamDestroy(handle))
    check(cu.cuMemFree(device))
    check(cu.cuMemFreeHost(host))
    return statistics.median(times[1:])


def stflow_read(array: np.ndarray, repeats: int) -> tuple[float, float]:
    """Seconds for a device task to read ``array`` (H2D), and for registration."""
    import stflow as stf

    times, registration = [], []
    for _ in range(repeats + 1):
        with stf.context(backend="cuda") as ctx:
            start = time.perf_counter()
            ld = ctx.logical_data(array)
            registered = time.perf_counter()
            with ctx.task(stf.exec_place.device(0), ld.read()) as t:
                stream = int(t.stream_ptr())
            check(driver().cuStreamSynchronize(stream))
            times.append(time.perf_counter() - registered)
            registration.append(registered - start)
    return statistics.median(times[1:]), statistics.median(registration[1:])


def page_aligned(nbytes: int) -> np.ndarray:
    """A float64 array whose data starts on a page boundary.

    Chunks of it that are whole pages can each be page-locked; slices sharing a page
    with a neighbour cannot (the driver refuses overlapping registrations), and stflow
    then moves them through pinned staging buffers, which is slower.
    """
    raw = np.empty(nbytes + 4096, dtype=np.uint8)
    offset = (-raw.ctypes.data) % 4096
    return raw[offset : offset + nbytes].view(np.float64)


def pipeline(
    array: np.ndarray, chunks: int, scale_kernel, trace: str | None = None
) -> float:
    """Seconds from the first submission until every chunk is back in host memory.

    Each chunk: a device task scales it (its prologue copies it in), then a host
    callback reads it (its prologue copies it back). Page-locking (at registration)
    and unregistering (at finalize) are outside the timed region.
    """
    import stflow as stf
    from stflow.instrument import TraceRecorder

    parts = np.split(array, chunks)
    recorder = TraceRecorder(trace) if trace else None
    with stf.context(backend="cuda") as ctx:
        if recorder is not None:
            ctx.attach(recorder)
        lds = [ctx.logical_data(part) for part in parts]
        check(driver().cuCtxSynchronize())
        start = time.perf_counter()
        for ld in lds:
            with ctx.task(stf.exec_place.device(0), ld.rw()) as t:
                scale_kernel(t)
            ctx.host_launch(ld.read(), fn=_nothing)
        check(driver().cuStreamSynchronize(ctx.fence()))
        seconds = time.perf_counter() - start
    return seconds


def _nothing(*_) -> None:
    pass


def overlap_in_trace(path: str) -> tuple[int, int]:
    """(copies that overlap a kernel on another stream, copies) in a trace file."""
    events = json.load(open(path))["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    copies = [e for e in spans if e["cat"] == "transfer"]
    kernels = [e for e in spans if e["cat"] == "task"]
    overlapping = sum(
        any(
            (k["pid"], k["tid"]) != (c["pid"], c["tid"])
            and k["ts"] < c["ts"] + c["dur"]
            and c["ts"] < k["ts"] + k["dur"]
            for k in kernels
        )
        for c in copies
    )
    return overlapping, len(copies)


def cupy_scale(t) -> None:
    from stflow.testing import cupy_array, cupy_stream

    with cupy_stream(t.stream_ptr()):
        view = cupy_array(t.get_arg_cai(0))
        view *= 2.0


def kernels_alone(array: np.ndarray, chunks: int) -> float:
    import cupy

    parts = [cupy.asarray(p) for p in np.split(array, chunks)]
    for part in parts:
        part *= 1.0  # compile the kernel first
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    for part in parts:
        part *= 2.0
    cupy.cuda.Device().synchronize()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--chunks", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--trace",
        default=None,
        help="also write a Perfetto trace of one pipeline run here",
    )
    args = parser.parse_args(argv)
    nbytes = int(args.gib * (1 << 30)) // (4096 * args.chunks) * 4096 * args.chunks
    array = page_aligned(nbytes)
    array[:] = 1.0
    import stflow as stf

    with stf.context(backend="cuda"):
        pass  # initialise the driver
    raw_h2d_s, raw_d2h_s = raw_h2d(nbytes, args.repeats)
    ours_s, registration_s = stflow_read(array, args.repeats)
    gbs = lambda seconds: nbytes / seconds / 1e9  # noqa: E731
    results = {
        "bytes": nbytes,
        "raw_h2d_GBps": gbs(raw_h2d_s),
        "raw_d2h_GBps": gbs(raw_d2h_s),
        "stflow_h2d_GBps": gbs(ours_s),
        "registration_s": registration_s,
        "ratio": raw_h2d_s / ours_s,
    }
    print(
        f"H2D of {nbytes / 2**30:.2f} GiB: stflow {results['stflow_h2d_GBps']:.1f} GB/s, "
        f"raw pinned {results['raw_h2d_GBps']:.1f} GB/s, ratio {results['ratio']:.2f} "
        f"(target ≥ 0.9); page-locking the user array took {registration_s * 1e3:.0f} ms"
    )
    kernel_s = kernels_alone(array, args.chunks)
    runs = [pipeline(array, args.chunks, cupy_scale) for _ in range(args.repeats)]
    pipe_s = statistics.median(runs)
    if args.trace:
        pipeline(array, args.chunks, cupy_scale, args.trace)
        overlapping, copies = overlap_in_trace(args.trace)
        results["trace_copies_overlapping_kernels"] = [overlapping, copies]
        print(
            f"trace: {overlapping} of {copies} copies overlap a kernel on another stream"
        )
    slowest = max(raw_h2d_s, raw_d2h_s, kernel_s)
    duplex_s = raw_duplex(nbytes, args.repeats)
    hand_s = raw_pipeline(nbytes, args.chunks, args.repeats)
    results.update(
        {
            "pipeline_s": pipe_s,
            "stage_h2d_s": raw_h2d_s,
            "stage_d2h_s": raw_d2h_s,
            "stage_kernel_s": kernel_s,
            "overlap": slowest / pipe_s,
            "raw_duplex_s": duplex_s,
            "hand_written_pipeline_s": hand_s,
            "overlap_hand_written": slowest / hand_s,
            "against_hand_written": hand_s / pipe_s,
            "chunks": args.chunks,
        }
    )
    print(
        f"pipeline of {args.chunks} chunks: {pipe_s * 1e3:.1f} ms; stages alone: "
        f"H2D {raw_h2d_s * 1e3:.1f} ms, kernels {kernel_s * 1e3:.1f} ms, "
        f"D2H {raw_d2h_s * 1e3:.1f} ms; overlap {results['overlap']:.0%} (target ≥ 90%)"
    )
    print(
        f"both directions at once (raw, pinned): {duplex_s * 1e3:.1f} ms; the pipeline "
        f"written by hand: {hand_s * 1e3:.1f} ms (overlap "
        f"{results['overlap_hand_written']:.0%}); stflow against it "
        f"{results['against_hand_written']:.2f}×"
    )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)
    return results


if __name__ == "__main__":
    main()
