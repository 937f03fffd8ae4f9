"""The CUDA backend's staged copies (``backends/_cuda_staging.py``) against a simulated
driver: streams are threads running their operations in order, a flag wait polls host
memory as ``cuStreamWaitValue32`` polls the pinned page, events complete when their
stream reaches them. What the stager does with tickets, flags, and its
host threads then runs unchanged on the CPU, with chunks of a few hundred bytes
and a ring of four, so that copies wrap around the ring many times; results are
compared with NumPy, and a deadlock shows as a timeout.
"""

from __future__ import annotations

import ctypes
import queue
import random
import threading
import time
import types

import numpy as np
import pytest

from stflow.backends import _cuda_staging
from stflow.backends._host_memory import copy_elements

TIMEOUT = 20.0


class _Event:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.done.set()  # never recorded: complete


class _Stream:
    """A simulated stream: a thread running operations in order."""

    def __init__(self, name: str) -> None:
        self.native = self
        self.ordinal = 0
        self.error_sink = None
        self.handle = id(self)
        self.ops: queue.Queue = queue.Queue()
        self.failure: BaseException | None = None
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def _run(self) -> None:
        while True:
            op = self.ops.get()
            try:
                op()
            except BaseException as exc:  # noqa: BLE001 - shown by the test
                self.failure = exc

    def enqueue(self, op) -> None:
        self.ops.put(op)

    def drain(self) -> None:
        done = threading.Event()
        self.enqueue(done.set)
        assert done.wait(TIMEOUT), "the stream did not drain: a deadlock"
        assert self.failure is None, self.failure


class _Driver:
    """What the stager calls of ``cuda.bindings.driver``, on simulated streams."""

    CU_MEMHOSTALLOC_PORTABLE = 1
    CU_MEMHOSTALLOC_DEVICEMAP = 2

    class CUstreamWaitValue_flags:
        CU_STREAM_WAIT_VALUE_EQ = 1

    def __init__(self) -> None:
        self.kept: list = []

    def cuMemHostAlloc(self, nbytes, flags):
        buffer = (ctypes.c_uint8 * nbytes)()
        self.kept.append(buffer)
        return 0, ctypes.addressof(buffer)

    def cuMemHostGetDevicePointer(self, ptr, flags):
        return 0, ptr

    def cuStreamWaitValue32(self, stream, address, value, flags):
        word = ctypes.c_uint32.from_address(address)

        def wait() -> None:
            deadline = time.monotonic() + TIMEOUT
            while word.value != value:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"flag at 0x{address:x} never reached {value}")
                time.sleep(0)

        stream.enqueue(wait)
        return (0,)

    def cuEventRecord(self, event, stream):
        done = event.done = threading.Event()  # a new record
        stream.enqueue(done.set)
        return (0,)

    def cuStreamWaitEvent(self, stream, event, flags):
        done = event.done  # the record at the time of the call

        def wait() -> None:
            if not done.wait(TIMEOUT):
                raise TimeoutError("an event never completed")

        stream.enqueue(wait)
        return (0,)

    def cuEventSynchronize(self, event):
        if not event.done.wait(TIMEOUT):
            raise TimeoutError("an event never completed")
        return (0,)


class _Memory:
    """The part of ``CudaMemory`` the stager uses: device memory is host memory here."""

    def launch_host_func(self, stream, fn) -> None:
        stream.enqueue(fn)

    def _pitched_copies(
        self, dst, dst_strides, src, src_strides, shape, itemsize, stream
    ):
        stream.enqueue(
            lambda: copy_elements(dst, dst_strides, src, src_strides, shape, itemsize)
        )

    def _new_event(self, device: int) -> _Event:
        return _Event()

    def _ensure_context(self) -> None:
        pass


@pytest.fixture
def stager(monkeypatch):
    driver = _Driver()
    fake = types.SimpleNamespace(
        driver=driver,
        check=lambda result, what: result[1],
        error=lambda err, what: RuntimeError(what),
    )
    monkeypatch.setattr(_cuda_staging, "_cu", fake)
    return _cuda_staging.Stager(_Memory(), chunk=256, slots=4, threads=3)


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _strides(view: np.ndarray) -> tuple[int, ...] | None:
    return None if view.flags.c_contiguous else tuple(view.strides)


def test_tiles_go_to_the_device_and_back_through_a_small_ring(stager):
    """Tiles of a matrix (strided, several chunks each) staged to dense device
    buffers ahead of their streams, changed there, and staged back: the matrix gets
    the new values and nothing between the tiles changes."""
    rng = random.Random(0)
    matrix = np.arange(40 * 30, dtype=np.float64).reshape(40, 30)
    expected = matrix.copy()
    streams = [_Stream(f"s{k}") for k in range(3)]
    tiles = [
        (slice(r, r + 10), slice(c, c + 8)) for r in (0, 10, 20, 30) for c in (0, 8, 16)
    ]
    device = {}
    for k, where in enumerate(tiles):
        view = matrix[where]
        device[k] = np.full(view.shape, np.nan)
        stream = streams[k % 3]
        stager.to_device(
            _address(device[k]),
            None,
            _address(view),
            _strides(view),
            view.shape,
            8,
            stream,
            source_ready=rng.random() < 0.7,
        )
        buffer = device[k]
        stream.enqueue(lambda b=buffer, k=k: np.multiply(b, -(k + 1), out=b))
        expected[where] *= -(k + 1)
    for k, where in enumerate(tiles):
        view = matrix[where]
        stager.to_host(
            _address(view),
            _strides(view),
            _address(device[k]),
            None,
            view.shape,
            8,
            streams[k % 3],
        )
    for stream in streams:
        stream.drain()
    np.testing.assert_array_equal(matrix, expected)


def test_a_gather_not_declared_ready_waits_for_its_stream(stager):
    """A source written on the stream before the copy (a host callback here) is
    gathered after that write when the copy is not ``source_ready``."""
    stream = _Stream("s")
    source = np.zeros(100)
    target = np.full(100, np.nan)
    gate = threading.Event()
    stream.enqueue(lambda: gate.wait(TIMEOUT))  # the stream is held back...
    stream.enqueue(lambda: source.fill(3.0))  # ...then writes the source
    stager.to_device(
        _address(target), None, _address(source), None, (800,), 1, stream, False
    )
    gate.set()
    stream.drain()
    np.testing.assert_array_equal(target, 3.0)


def test_a_failing_job_is_reported_and_the_stream_goes_on(stager):
    stream = _Stream("s")
    failures = []
    stream.error_sink = failures.append
    target = np.zeros(4)
    source = np.arange(4.0)

    def broken(*args, **kwargs):
        raise MemoryError("no room")

    original = _cuda_staging._gather
    _cuda_staging._gather = lambda *args: broken
    try:
        stager.to_device(
            _address(target), None, _address(source), None, (4,), 8, stream, True
        )
        stream.drain()
    finally:
        _cuda_staging._gather = original
    assert [type(f) for f in failures] == [MemoryError]


def test_many_streams_and_threads_stay_ordered(stager):
    """Copies from several submitting threads, each round trip on its own stream,
    wrapping the ring of four chunks many times."""
    streams = [_Stream(f"s{k}") for k in range(4)]
    results = {}

    def worker(k: int) -> None:
        stream = streams[k]
        for round_ in range(20):
            source = np.arange(64, dtype=np.float64) + 1000 * k + round_
            device = np.zeros(64)
            back = np.zeros(64)
            stager.to_device(
                _address(device), None, _address(source), None, (64,), 8, stream, True
            )
            stream.enqueue(lambda d=device: np.add(d, 1, out=d))
            stager.to_host(_address(back), None, _address(device), None, (64,), 8, stream)
            stream.drain()
            results[k, round_] = (back.copy(), source + 1)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT * 4)
    assert len(results) == 80
    for got, want in results.values():
        np.testing.assert_array_equal(got, want)


def test_a_copy_larger_than_the_ring_drains_in_turns(stager):
    """A copy back of more bands than the ring has chunks: each chunk is reused
    only after its first band drained."""
    stream = _Stream("s")
    device = np.arange(300, dtype=np.float64)  # 2400 B: ten bands of 256 B, 4 chunks
    host = np.zeros(300)
    stager.to_host(_address(host), None, _address(device), None, (2400,), 1, stream)
    stream.drain()
    np.testing.assert_array_equal(host, device)
