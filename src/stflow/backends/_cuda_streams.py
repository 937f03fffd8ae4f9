"""Streams, events and timestamps of the CUDA backend.

:class:`CudaStreams` is the ordering half of :class:`~stflow.backends.cuda.CudaBackend`
(a mixin, like ``_cuda_memory.CudaMemory``: it uses the backend's contexts, free lists
and the driver functions that ``CudaBackend.__init__`` binds). :class:`DriverStream`
and :class:`DriverEvent` are the contract's ``Stream`` and ``Event`` on the driver.

Streams
    Runtime streams are ``CU_STREAM_NON_BLOCKING`` streams of a device's primary
    context. :meth:`CudaStreams.destroy_stream` keeps the native stream on a small
    per-device free list instead of destroying it, so creating a context (a nested
    ``context(stream=t.stream_ptr())`` inside a task, say) costs no driver call.
    Foreign handles (``context(stream=...)``) are wrapped, never owned, and the wrapper
    is cached per handle so the ordering layer sees one object per stream.

Events
    ``CU_EVENT_DISABLE_TIMING`` events come from a free list per device (events must
    belong to their stream's context). The runtime keeps :class:`DriverEvent` objects
    and may wait on old ones long after they were recorded, so a handle goes back to
    the free list only when its Python object is collected (``__del__``; reference
    counting makes that deterministic). Re-recording a handle whose previous record
    has not completed is legal: waits already enqueued captured the earlier state.

Blocking
    ``synchronize`` and ``synchronize_producer`` raise ``ScopeError`` when called
    from a host callback. Blocking calls of cuda-bindings 13 release the GIL; with
    older bindings, while host callbacks are pending, the host polls instead of
    blocking, so that the callbacks (which need the GIL) can run.

Timestamps
    Timing events (for traces) come from a pool of their own per device. They are
    read as offsets from a time origin per device whose host time is known, taken
    again every few seconds because the device and host clocks drift apart.

The hot path
    ``record`` and ``wait`` pass cached native ``CUstream`` / ``CUevent`` objects (the
    bindings' fastest argument path, measured), call driver functions bound once as
    attributes, and create no CUDA objects.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any

from .._core.errors import ScopeError
from . import _cuda_driver as _cu
from ._base import HOST, Event, Stream, callback_state
from ._stream_types import PooledEvent

__all__ = ["CudaStreams", "DriverEvent", "DriverStream"]

_STREAM_FREE_LIST = 32
"""Native streams kept per device for reuse by later contexts."""


class DriverStream(Stream):
    """A CUDA stream.

    Attributes
    ----------
    native : CUstream
        The bindings' handle object, passed to driver calls.
    events : list
        The free list of event handles of its device (``ordinal``: the device whose
        context the stream belongs to; ``device`` is ``HOST`` for the streams of host
        execution places, which still live on a device).
    owned : bool
        False for wrapped foreign handles, which stflow never destroys.
    generation : int
        The backend's context generation when it was made
        (:meth:`CudaBackend.revalidate_contexts`): a stream of an older one belongs
        to a destroyed context and is never reused.
    """

    __slots__ = ("native", "events", "owned", "generation", "__weakref__")

    def __init__(
        self,
        native: Any,
        device: int,
        ordinal: int,
        events: list,
        owned: bool,
        error_sink: Callable[..., None] | None = None,
        generation: int = 0,
    ) -> None:
        super().__init__(int(native), device, ordinal, error_sink)
        self.native = native
        self.events = events
        self.owned = owned
        self.generation = generation


DriverEvent = PooledEvent
"""A recorded CUDA event; its handle returns to its stream's free list when collected
(compiled: one is made per task)."""


_ORIGIN_SECONDS = 5.0
"""Age after which a device's time origin is taken again (clock drift)."""


class _Timestamp:
    """A timing event of :meth:`CudaBackend.timestamp`; pooled like events.

    ``origin`` is the device's time origin when it was taken: ``(timestamp, host
    seconds)``, kept alive by the stamps measured from it."""

    __slots__ = ("device", "handle", "pool", "origin")

    def __init__(
        self,
        device: int,
        handle: Any,
        pool: list,
        origin: tuple[_Timestamp, float] | None = None,
    ) -> None:
        self.device = device
        self.handle = handle
        self.pool = pool
        self.origin = origin

    def __del__(self) -> None:
        self.pool.append(self.handle)


class CudaStreams:
    """Streams, events and timestamps of the backend contract on the CUDA driver (a
    mixin)."""

    _context_device: dict[int, int]
    _event_pools: list[list[Any]]
    _free_streams: list[list[Any]]
    _timing_pools: list[list[Any]]
    _time_origins: list[tuple[_Timestamp, float]]
    _service: list[Any]
    _generation: int
    _streams: weakref.WeakValueDictionary[int, DriverStream]
    _foreign: dict[Any, DriverStream]
    _host_funcs: dict[int, tuple[Callable[[], None], Stream, bool]]
    _blocking_releases_gil: bool
    _not_ready: Any
    _deferred: list
    _cuEventRecord: Callable[..., Any]
    _cuStreamWaitEvent: Callable[..., Any]
    _cuEventQuery: Callable[..., Any]
    _cuEventSynchronize: Callable[..., Any]
    _push: Callable[[int], None]
    _pop: Callable[[int], None]
    _ensure_context: Callable[[], None]
    _check_ordinal: Callable[[int, str], None]
    current_device: Callable[[], int]
    _reap: Callable[[], None]

    # -- streams -----------------------------------------------------------------
    def _new_stream(self, device: int) -> Any:
        d = _cu.driver
        self._push(device)
        try:
            flags = int(d.CUstream_flags.CU_STREAM_NON_BLOCKING)
            return _cu.check(
                d.cuStreamCreate(flags), f"creating a stream on device {device}"
            )
        finally:
            self._pop(device)

    def create_stream(
        self,
        device: int,
        error_sink: Callable[..., None] | None = None,
        partition: Any = None,
    ) -> DriverStream:
        """A non-blocking stream on ``device`` (``HOST``: on the current device); with
        ``partition``, in that green or foreign context (``_cuda_green``)."""
        ordinal = self.current_device() if device == HOST else device
        self._check_ordinal(ordinal, "create_stream")
        if partition is not None:
            from ._cuda_green import partition_stream

            native = partition_stream(partition)
        else:
            try:
                native = self._free_streams[ordinal].pop()
            except IndexError:
                native = self._new_stream(ordinal)
        stream = DriverStream(
            native,
            device,
            ordinal,
            self._event_pools[ordinal],
            True,
            error_sink,
            self._generation,
        )
        stream.partition = partition
        self._streams[stream.handle] = stream
        return stream

    def destroy_stream(self, stream: Stream) -> None:
        """Release a stream of :meth:`create_stream` (foreign streams are left alone).

        Notes
        -----
        Work still queued on the stream completes normally; the native stream is
        kept for reuse by a later :meth:`create_stream`.
        """
        if not isinstance(stream, DriverStream) or not stream.owned:
            return
        stream.owned = False
        self._streams.pop(stream.handle, None)
        if stream.generation != self._generation:  # its context was destroyed
            return
        if stream.partition is not None:  # never reused outside its partition
            _cu.check(
                _cu.driver.cuStreamDestroy(stream.native),
                f"destroying a stream of {stream.partition}",
            )
            return
        free = self._free_streams[stream.ordinal]
        if len(free) < _STREAM_FREE_LIST:
            free.append(stream.native)
        else:
            _cu.check(
                _cu.driver.cuStreamDestroy(stream.native),
                f"destroying a stream of device {stream.ordinal}",
            )

    def stream_from_handle(self, handle: int) -> DriverStream:
        """Wrap a raw ``CUstream`` handle (``0``: the legacy default stream).

        Notes
        -----
        The stream is not owned: stflow never destroys it. Handles of stflow's own
        streams give back those streams. A foreign stream must belong to a primary
        context (as those of CuPy, PyTorch and Numba do).
        """
        own = self._streams.get(handle)
        if own is not None:
            return own
        key: Any = (handle, self.current_device()) if handle in (0, 1, 2) else handle
        stream = self._foreign.get(key)
        if stream is None:
            self._ensure_context()
            native = _cu.driver.CUstream(handle)
            ordinal = key[1] if isinstance(key, tuple) else self._stream_device(native)
            stream = DriverStream(
                native, ordinal, ordinal, self._event_pools[ordinal], False
            )
            self._foreign[key] = stream
        return stream

    def _stream_device(self, native: Any) -> int:
        d = _cu.driver
        get_device = getattr(d, "cuStreamGetDevice", None)  # CUDA 12.8 and later
        if get_device is not None:
            return int(_cu.check(get_device(native), "cuStreamGetDevice"))
        ctx = _cu.check(d.cuStreamGetCtx(native), "cuStreamGetCtx")
        device = self._context_device.get(int(ctx))
        if device is None:
            _cu.check(d.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
            try:
                device = int(_cu.check(d.cuCtxGetDevice(), "cuCtxGetDevice"))
            finally:
                _cu.check(d.cuCtxPopCurrent(), "cuCtxPopCurrent")
        return device

    def synchronize_producer(self, handle: int) -> None:
        """Block until a producer's stream is idle (1: legacy, 2: per-thread default).

        Raises
        ------
        ScopeError
            Called from a host callback.
        CudaError
            ``cuStreamSynchronize`` failed.
        """
        self._refuse_in_callback()
        self._ensure_context()
        native = _cu.driver.CUstream(handle)
        step = f"synchronising the producer stream 0x{handle:x}"
        if self._host_funcs and not self._blocking_releases_gil:
            self._poll(_cu.driver.cuStreamQuery, native, step)
        else:
            _cu.check(_cu.driver.cuStreamSynchronize(native), step)
        self._reap()

    # -- events ------------------------------------------------------------------
    def _new_event(self, device: int, timing: bool = False) -> Any:
        d = _cu.driver
        flags = int(
            d.CUevent_flags.CU_EVENT_DEFAULT
            if timing
            else d.CUevent_flags.CU_EVENT_DISABLE_TIMING
        )
        self._push(device)
        try:
            return _cu.check(
                d.cuEventCreate(flags), f"creating an event on device {device}"
            )
        finally:
            self._pop(device)

    def record(self, stream: Stream) -> DriverEvent:
        pool = stream.events  # type: ignore[attr-defined]
        try:
            handle = pool.pop()
        except IndexError:
            handle = self._new_event(stream.ordinal)
        (err,) = self._cuEventRecord(handle, stream.native)  # type: ignore[attr-defined]
        if err:
            pool.append(handle)
            raise _cu.error(err, f"cuEventRecord on {stream!r}") from None
        seq = stream.recorded = stream.recorded + 1
        event = DriverEvent(stream, seq, handle, pool)
        stream.last_event = event
        return event

    def wait(self, stream: Stream, event: Event) -> None:
        (err,) = self._cuStreamWaitEvent(stream.native, event.handle, 0)  # type: ignore
        if err:
            raise _cu.error(
                err, f"cuStreamWaitEvent: {stream!r} waiting for {event!r}"
            ) from None

    def query(self, event: Event) -> bool:
        (err,) = self._cuEventQuery(event.handle)  # type: ignore[attr-defined]
        if not err:
            return True
        if err == self._not_ready:
            return False
        raise _cu.error(err, f"cuEventQuery of {event!r}") from None

    def synchronize(self, event: Event) -> None:
        """Block the host until ``event`` completes.

        Raises
        ------
        ScopeError
            Called from a host callback, where blocking on the device would
            deadlock.
        CudaError
            The event (or work before it) failed.
        """
        self._refuse_in_callback()
        handle = event.handle  # type: ignore[attr-defined]
        (err,) = self._cuEventQuery(handle)
        if err == self._not_ready:
            if self._host_funcs and not self._blocking_releases_gil:
                self._poll(self._cuEventQuery, handle, f"synchronising {event!r}")
                err = 0
            else:
                (err,) = self._cuEventSynchronize(handle)
        if err:
            raise _cu.error(err, f"synchronising {event!r}") from None
        if self._deferred:
            self._reap()

    @staticmethod
    def _refuse_in_callback() -> None:
        if callback_state.active:
            raise ScopeError(
                "device work must not block on the device; do not wait "
                "for stflow work from a host callback"
            )

    def _poll(self, query: Callable, handle: Any, step: str) -> None:
        """Wait for ``query(handle)`` to succeed, releasing the GIL between queries.

        Used instead of a blocking driver call when the bindings hold the GIL during
        such calls and a host callback (which needs the GIL) may still be pending.
        """
        delay = 1e-6
        while True:
            (err,) = query(handle)
            if not err:
                return
            if err != self._not_ready:
                raise _cu.error(err, step) from None
            time.sleep(delay)
            delay = min(delay * 2, 1e-4)

    # -- timestamps (for traces) -------------------------------------------------
    def timestamp(self, stream: Stream | None) -> Any:
        """A timing event recorded on ``stream`` (``None``: the host clock, now).

        Notes
        -----
        Read it with :meth:`timestamp_seconds` once the work before it completed.
        Timing events come from their own per-device pool.
        """
        if stream is None:
            return time.perf_counter()
        device = stream.ordinal
        origin = self._time_origins[device]
        if time.perf_counter() - origin[1] > _ORIGIN_SECONDS:
            # The device and host clocks drift apart (a few µs per second): a fresh
            # origin keeps stamps within tens of µs of the host clock.
            origin = self._time_origins[device] = self._time_origin(device)
        pool = self._timing_pools[device]
        try:
            handle = pool.pop()
        except IndexError:
            handle = self._new_event(device, timing=True)
        (err,) = self._cuEventRecord(handle, stream.native)  # type: ignore[attr-defined]
        if err:
            pool.append(handle)
            raise _cu.error(err, f"recording a timestamp on {stream!r}") from None
        return _Timestamp(device, handle, pool, origin)

    def timestamp_seconds(self, stamp: Any) -> float:
        """Seconds of ``stamp`` on ``time.perf_counter``'s clock (blocks until taken).

        Device times are offsets from a timing event per device whose host time was
        read when the backend started, so they are comparable across devices and
        with host timestamps to within tens of microseconds.
        """
        if not isinstance(stamp, _Timestamp):
            return float(stamp)
        assert stamp.origin is not None
        origin, origin_seconds = stamp.origin
        _cu.check(self._cuEventSynchronize(stamp.handle), "waiting for a timestamp")
        elapsed = _cu.check(
            _cu.driver.cuEventElapsedTime(origin.handle, stamp.handle),
            f"reading a timestamp of device {stamp.device}",
        )
        return origin_seconds + float(elapsed) / 1e3

    def _time_origin(self, device: int) -> tuple[_Timestamp, float]:
        """A timing event of ``device`` and the host time when it completed."""
        pool = self._timing_pools[device]
        event = pool.pop() if pool else self._new_event(device, timing=True)
        service = self._service[device]
        _cu.check(self._cuEventRecord(event, service), "recording a time origin")
        _cu.check(self._cuEventSynchronize(event), "recording a time origin")
        return _Timestamp(device, event, pool), time.perf_counter()
