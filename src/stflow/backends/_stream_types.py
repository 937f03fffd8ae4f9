"""A backend's streams and events: what the ordering layer (``_core/deps.py``, the
plan) reads on every task, compiled with it (``_compile.COMPILED_MODULES``) so that
those reads are native. Each backend subclasses both (``Backend.record`` makes its
events); ``_base`` re-exports them with the rest of the backend contract."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from .._compile import mypyc_attr
from .._interchange.views import CudaStream

__all__ = ["Event", "PooledEvent", "Stream"]


@mypyc_attr(allow_interpreted_subclasses=True)
class Stream:
    """A stream of a backend.

    Attributes
    ----------
    handle : CudaStream
        The raw handle (``CUstream`` on CUDA, an opaque id on the emulated backend), an
        ``int`` that also speaks ``__cuda_stream__``.
    device : int
        The execution place it serves (``HOST`` for streams of host places).
    ordinal : int
        The device whose context the stream belongs to (streams of host places live
        on a device too).
    recorded : int
        Number of events recorded on it so far; the newest has ``seq == recorded``.
    waited : dict
        For every other stream, the ``seq`` of the newest event of that stream this
        stream already waits for (used to skip redundant waits). Only the runtime that
        owns the stream writes it; foreign streams are never given ordering state.
    last_event : Event or None
        The newest event recorded on it.
    error_sink : callable or None
        Where asynchronous failures of work on this stream are reported:
        ``error_sink(exc)`` or ``error_sink(exc, order)``.
    partition : StreamPartition or None
        The SM partition or foreign CUDA context it was created in (green and
        ``from_context`` places, ``_places.stream_partitions.StreamPartition``);
        ``None`` for the device's own context.
    captures : bool
        True for a stream whose work is captured into a graph that runs later (graph
        mode's recording streams), False for a stream whose work runs when it is
        enqueued. A class attribute.

    A backend that keeps its streams in weak dictionaries (handle -> stream) adds
    ``__weakref__`` to its subclass's ``__slots__``: a compiled class offers none.
    """

    captures: ClassVar[bool] = False

    __slots__ = (
        "handle",
        "device",
        "ordinal",
        "recorded",
        "waited",
        "last_event",
        "error_sink",
        "partition",
    )

    def __init__(
        self,
        handle: int,
        device: int,
        ordinal: int | None = None,
        error_sink: Callable[..., None] | None = None,
    ) -> None:
        self.handle = CudaStream(handle)
        self.device = device
        self.ordinal = max(device, 0) if ordinal is None else ordinal
        self.recorded = 0
        self.waited: dict[Stream, int] = {}
        self.last_event: Event | None = None
        self.error_sink = error_sink
        self.partition: Any = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} 0x{self.handle:x} device={self.device}>"


@mypyc_attr(allow_interpreted_subclasses=True)
class Event:
    """A point in a stream: complete once the work enqueued before it has run.

    ``producer`` (set only while instruments listen) is the ident of the work whose
    completion the event marks.
    """

    __slots__ = ("stream", "seq", "producer")

    def __init__(self, stream: Stream, seq: int) -> None:
        self.stream = stream
        self.seq = seq
        self.producer: int | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.stream.handle:x}#{self.seq}>"


class PooledEvent(Event):
    """An event over a backend's native handle (a ``CUevent``) taken from a free
    list, ``pool``, where the handle returns when the event is collected: recording
    an event costs no handle creation. Compiled, as the runtime makes one per task
    (``CudaStreams.record``)."""

    __slots__ = ("handle", "pool")

    def __init__(self, stream: Stream, seq: int, handle: Any, pool: list[Any]) -> None:
        self.stream = stream
        self.seq = seq
        self.producer = None
        self.handle = handle
        self.pool = pool

    def __del__(self) -> None:
        self.pool.append(self.handle)
