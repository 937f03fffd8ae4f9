"""The backend contract: everything the runtime asks of a device.

Every module above this one talks to devices only through a :class:`Backend`. A backend
is one module (``emulated.py``, ``cuda.py``) implementing these operations:

==================  ===============================================================
devices             ``device_count``, ``current_device``/``set_current_device``
streams             ``create_stream``, ``destroy_stream``, ``stream_from_handle``
events              ``record``, ``wait``, ``query``, ``synchronize``
memory              ``allocate``, ``free``, ``locate``, ``register_host``
copies              ``copy`` (any direction, stream-ordered)
host work           ``launch_host_func`` (a Python callable in stream order)
views               ``task_view`` (what a task body sees), ``host_array``
==================  ===============================================================

Streams and events are small objects with the attributes the ordering layer reads
(``_deps.py``): a stream knows its handle, its device, how many events were recorded on
it and which events of other streams it already waited for; an event knows its stream
and its position in that stream.
"""

from __future__ import annotations

import abc
import functools
import math
import threading
from typing import Any, Callable

import numpy as np

__all__ = ["Allocation", "Backend", "Event", "Stream", "HOST", "MANAGED", "USER_PAGEABLE",
           "callback_state", "describable", "pointer_array"]

HOST = -1
"""Device number used for host memory and host execution."""
MANAGED = -2
"""Device number used for managed memory."""
USER_PAGEABLE = -6
"""Place of a user's host buffer that could not be page-locked on a backend whose
host instances must be (see :attr:`Backend.pinned_host_required`): it is only ever a
copy source or a write-back target, never handed to a task."""


class _CallbackState(threading.local):
    active = False
    """True on threads that run device-side work (host callbacks, launched work)."""


callback_state = _CallbackState()
"""Per-thread flag: set while stflow runs user code in stream order. Such code must not
submit work to a context or block on the device."""


class Stream:
    """A stream of a backend.

    Attributes
    ----------
    handle : int
        The raw handle (``CUstream`` on CUDA, an opaque id on the emulated backend).
    device : int
        The device it belongs to (``HOST`` for streams of host execution places).
    recorded : int
        Number of events recorded on it so far; the newest has ``seq == recorded``.
    waited : dict
        For every other stream, the ``seq`` of the newest event of that stream this
        stream already waits for (used to skip redundant waits).
    last_event : Event or None
        The newest event recorded on it.
    error_sink : callable or None
        Where asynchronous failures of work on this stream are reported.
    """

    __slots__ = ("handle", "device", "recorded", "waited", "last_event", "error_sink",
                 "__weakref__")

    def __init__(self, handle: int, device: int) -> None:
        self.handle = handle
        self.device = device
        self.recorded = 0
        self.waited: dict[Stream, int] = {}
        self.last_event: Event | None = None
        self.error_sink: Callable[..., None] | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} 0x{self.handle:x} device={self.device}>"


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


class Allocation:
    """Memory owned by the runtime (or registered from the user).

    ``owner`` keeps whatever backs the memory alive (a NumPy buffer on the emulated
    backend, the user's array for registered memory).
    """

    __slots__ = ("ptr", "nbytes", "device", "dtype", "owner", "__weakref__")

    def __init__(self, ptr: int, nbytes: int, device: int, dtype: np.dtype,
                 owner: Any = None) -> None:
        self.ptr = ptr
        self.nbytes = nbytes
        self.device = device
        self.dtype = dtype
        self.owner = owner

    def __repr__(self) -> str:
        return f"<Allocation 0x{self.ptr:x} {self.nbytes} B device={self.device}>"


class Backend(abc.ABC):
    """The operations the runtime needs from a device.

    Notes
    -----
    All operations taking a ``stream`` are asynchronous and ordered on it, except those
    documented as blocking (``synchronize``). Backends are process-wide singletons
    shared by every context using them.
    """

    name: str
    """``"emulated"`` or ``"cuda"``."""
    bodies_wait_on_host: bool
    """True when a task body may touch its data from the host right after ``start()``
    (the emulated backend blocks the host until the prerequisites are done)."""
    graph_instantiations: int = 0
    """Graphs instantiated so far (graph mode's recording backend counts them)."""
    graphs: Any = None
    """Graph construction and launch (a ``_graphs.GraphSupport``), or ``None``."""
    records: bool = False
    """True for graph mode's recorder: task bodies are captured (``begin_body``)."""
    pinned_host_required: bool = False
    """True when host instances must be page-locked memory (so that device work can
    reach them): a user buffer that :meth:`register_host` cannot page-lock then lives
    at ``USER_PAGEABLE`` and tasks get a runtime-allocated pinned instance."""

    # -- devices -----------------------------------------------------------------
    @property
    @abc.abstractmethod
    def device_count(self) -> int:
        """Number of devices."""

    @abc.abstractmethod
    def current_device(self) -> int:
        """The calling thread's current device."""

    @abc.abstractmethod
    def set_current_device(self, device: int) -> None:
        """Make ``device`` current for the calling thread."""

    def describe(self) -> str:
        """A one-line description of the devices, for messages and the demo."""
        return f"{self.name} backend, {self.device_count} device(s)"

    # -- streams and events ------------------------------------------------------
    @abc.abstractmethod
    def create_stream(self, device: int) -> Stream:
        """Create a stream on ``device`` (``HOST``: a stream for host work)."""

    @abc.abstractmethod
    def destroy_stream(self, stream: Stream) -> None:
        """Destroy a stream once its queued work has completed."""

    @abc.abstractmethod
    def stream_from_handle(self, handle: int) -> Stream:
        """Wrap a raw stream handle given by the user (``context(stream=...)``)."""

    @abc.abstractmethod
    def record(self, stream: Stream) -> Event:
        """Record a new event on ``stream`` and make it ``stream.last_event``."""

    @abc.abstractmethod
    def wait(self, stream: Stream, event: Event) -> None:
        """Make ``stream`` wait (on the device) until ``event`` completes."""

    @abc.abstractmethod
    def query(self, event: Event) -> bool:
        """True when ``event`` has completed. Does not block."""

    @abc.abstractmethod
    def synchronize(self, event: Event) -> None:
        """Block the host until ``event`` completes."""

    # -- memory ------------------------------------------------------------------
    @abc.abstractmethod
    def allocate(self, device: int, nbytes: int, stream: Stream | None,
                 dtype: np.dtype) -> Allocation:
        """Allocate ``nbytes`` on ``device`` (``HOST``, ``MANAGED`` or an ordinal).

        Device memory is stream-ordered on ``stream``. ``dtype`` says what the memory
        will hold (the emulated backend poisons it accordingly).
        """

    @abc.abstractmethod
    def free(self, allocation: Allocation, stream: Stream | None) -> None:
        """Free ``allocation``, stream-ordered on ``stream`` when given."""

    @abc.abstractmethod
    def locate(self, ptr: int) -> int:
        """Where the memory at ``ptr`` lives: ``HOST``, ``MANAGED`` or an ordinal."""

    def register_host(self, array: np.ndarray) -> Any:
        """Page-lock a user host buffer; returns a token for :meth:`unregister_host`,
        or ``None`` when nothing was done (not needed, or refused)."""
        return None

    def unregister_host(self, token: Any) -> None:
        """Undo :meth:`register_host`."""

    def is_pinned(self, ptr: int, nbytes: int) -> bool:
        """True when host memory ``[ptr, ptr + nbytes)`` is already page-locked."""
        return False

    # -- copies and host work ----------------------------------------------------
    @abc.abstractmethod
    def copy(self, dst: int, src: int, nbytes: int, stream: Stream) -> None:
        """Copy ``nbytes`` from address ``src`` to address ``dst`` in stream order."""

    @abc.abstractmethod
    def fill(self, ptr: int, nbytes: int, pattern: bytes, stream: Stream) -> None:
        """Repeat ``pattern`` over ``nbytes`` at ``ptr`` in stream order."""

    @abc.abstractmethod
    def launch_host_func(self, stream: Stream, fn: Callable[[], None]) -> None:
        """Run ``fn()`` on a host thread in stream order. ``fn`` must not raise."""

    # -- synchronisation points of a context ------------------------------------
    def fence_stream(self, stream: Stream) -> Stream:
        """The stream ``fence()`` hands out, once ``stream`` waits for all the work.

        Stream mode: ``stream`` itself. Graph mode: the recorded epoch is launched
        and a real stream ordered after it is returned.
        """
        return stream

    def begin_body(self, stream: Stream) -> None:
        """A task body is about to enqueue work on ``stream`` (graph mode captures
        it); called only when :attr:`records` is true."""

    def pending_events(self) -> list[Event]:
        """Events of work the backend itself enqueued for the context (graph
        launches) that a fence or finalize must wait for."""
        return []

    def context_finalized(self) -> None:
        """Release what a backend holds for one context (per-context backends)."""

    # -- timestamps (for traces) -------------------------------------------------
    def timestamp(self, stream: Stream | None) -> Any:
        """A timestamp taken when ``stream`` reaches this point (``None``: now).

        Read it with :meth:`timestamp_seconds` once the work before it completed.
        """
        raise NotImplementedError(f"the {self.name} backend cannot time stream work")

    def timestamp_seconds(self, stamp: Any) -> float:
        """Seconds of a completed :meth:`timestamp`, on a clock common to all."""
        raise NotImplementedError(f"the {self.name} backend cannot time stream work")

    # -- views -------------------------------------------------------------------
    @abc.abstractmethod
    def task_view(self, allocation: Allocation, offset: int, shape: tuple[int, ...],
                  dtype: np.dtype, readonly: bool) -> Any:
        """The view a task body gets of an instance (CAI on CUDA)."""

    def host_array(self, allocation: Allocation, shape: tuple[int, ...], dtype: np.dtype,
                   readonly: bool) -> np.ndarray:
        """A zero-copy NumPy array of host-accessible memory."""
        owner = allocation if allocation.owner is None else allocation.owner
        return pointer_array(allocation.ptr, shape, dtype, readonly, owner)


class _ArrayInterfaceHolder:
    __slots__ = ("__array_interface__", "owner")

    def __init__(self, interface: dict, owner: Any) -> None:
        self.__array_interface__ = interface
        self.owner = owner


@functools.lru_cache(maxsize=256)
def describable(dtype: np.dtype) -> bool:
    """True when the array interface's ``descr`` reproduces ``dtype`` exactly (it
    cannot express the padding of aligned records, for instance)."""
    try:
        return bool(np.dtype(dtype.descr) == dtype) if dtype.fields else True
    except (TypeError, ValueError):
        return False


def pointer_array(ptr: int, shape: tuple[int, ...], dtype: np.dtype, readonly: bool,
                  owner: Any) -> np.ndarray:
    """A NumPy array of exactly ``dtype`` over ``ptr`` that keeps ``owner`` alive."""
    if describable(dtype):
        holder = _ArrayInterfaceHolder(
            {"version": 3, "shape": tuple(shape), "typestr": dtype.str,
             "descr": dtype.descr, "data": (ptr, readonly), "strides": None},
            owner,
        )
        return np.asarray(holder)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.asarray(_ArrayInterfaceHolder(
        {"version": 3, "shape": (nbytes,), "typestr": "|u1", "data": (ptr, readonly),
         "strides": None}, owner))
    return raw.view(dtype).reshape(shape)
