"""The backend contract: everything the runtime asks of a device.

Every module above ``backends/`` talks to devices only through a :class:`Backend`, and
only ``backends/`` imports ``cuda.bindings``. A backend is one module (``emulated.py``,
``cuda.py``, ``null.py``) implementing the abstract methods below; everything else has
a default. A new backend can be written from this file alone.

==================  ===============================================================
devices             ``device_count``, ``current_device``/``set_current_device``,
                    ``describe``, ``machine_init``
streams             ``create_stream``, ``destroy_stream``, ``stream_from_handle``
events              ``record``, ``wait``, ``query``, ``synchronize``
memory              ``allocate``, ``free``, ``locate``, ``register_host``,
                    ``unregister_host``, ``is_pinned``
copies              ``copy`` (any direction, stream-ordered), ``fill``
device work         ``launch_host_func`` (a Python callable in stream order),
                    ``launch_kernel`` (a ``cuda_kernel`` launch)
foreign producers   ``synchronize_producer`` (a CUDA Array Interface ``stream``)
views               ``task_view`` (what a task body sees), ``host_array``
SM partitions       ``split_device``, ``context_partition``, ``enter_partition``,
                    ``locality_domain_count`` (green and ``from_context`` places)
timestamps          ``timestamp``, ``timestamp_seconds`` (traces only)
graphs              ``graphs``: a ``_graphs.GraphSupport`` or ``None``
==================  ===============================================================

Capabilities are plain attributes or methods with a default, never probed by name:
``name``, ``bodies_wait_on_host``, ``pinned_host_required``, ``gpu_memory``,
``cuda_contexts``, ``nvtx_ranges``, ``seed``; ``revalidate_contexts``,
``launch_callable`` and ``set_loop_condition`` (Python device work of the
host-memory backends).

Streams and events are small objects with the attributes the ordering layer reads
(``_core/deps.py``): a stream knows its handle, its device, how many events were recorded on
it and which events of other streams it already waited for; an event knows its stream
and its position in that stream. Device numbers double as places (:data:`HOST`,
:data:`MANAGED`, :data:`AFFINE`, :data:`USER_PAGEABLE`, or an ordinal).
"""

from __future__ import annotations

import abc
import functools
import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._interchange.views import ViewLifetime
from ._stream_types import Event, Stream

__all__ = [
    "AFFINE",
    "Allocation",
    "Backend",
    "CompositeAllocation",
    "CurrentDevice",
    "Event",
    "HOST",
    "KernelLaunch",
    "MANAGED",
    "NO_AFFINE",
    "Stream",
    "USER_PAGEABLE",
    "callback_state",
    "describable",
    "pointer_array",
    "poison",
]

HOST = -1
"""Device number used for host memory and host execution."""
MANAGED = -2
"""Device number used for managed memory."""
AFFINE = -3
"""Place number of ``data_place.affine()``: the memory of the task's execution place
(a place only; never the device of an instance)."""
NO_AFFINE = -7
"""The affine place of a grid that has none: a dependency without a place fails."""
USER_PAGEABLE = -6
"""Place of a user's host buffer that is not page-locked on a backend whose host
instances must be (see :attr:`Backend.pinned_host_required`): the buffer was too large
(``STFLOW_PIN_LIMIT``) or the driver refused. It is a copy source, a write-back target,
and what host callbacks (``host_launch``) see; tasks whose stream may reach host memory
from a device (``exec_place.host()``, a host data place) get a page-locked instance of
the runtime's."""


class _CallbackState(threading.local):
    active = False
    """True on threads that run device-side work (host callbacks, launched work)."""


callback_state = _CallbackState()
"""Per-thread flag: set while stflow runs user code in stream order. Such code must not
submit work to a context or block on the device."""


class CurrentDevice(threading.local):
    """The current device of each thread, for backends that keep it themselves."""

    device = 0


class Allocation:
    """Memory owned by the runtime (or registered from the user).

    ``owner`` keeps whatever backs the memory alive (a NumPy buffer on the emulated
    backend, the user's array for registered memory). ``strides`` are the byte
    strides of a user buffer that is not C-contiguous (``stflow._core.layout``): its
    ``nbytes`` data bytes then lie between ``ptr`` and ``ptr + extent``. Memory the
    runtime allocates is always dense (``strides`` is ``None``). ``arrays`` holds what
    task bodies made over this memory once, for the next tasks (``task.run``'s CuPy
    arrays, per device; :meth:`Backend.host_array`'s NumPy arrays, per access kind;
    the emulated read guard's memoryview); it goes with the allocation.
    """

    __slots__ = (
        "ptr",
        "nbytes",
        "device",
        "dtype",
        "owner",
        "strides",
        "arrays",
        "__weakref__",
    )

    def __init__(
        self,
        ptr: int,
        nbytes: int,
        device: int,
        dtype: np.dtype,
        owner: Any = None,
        strides: tuple[int, ...] | None = None,
    ) -> None:
        self.ptr = ptr
        self.nbytes = nbytes
        self.device = device
        self.dtype = dtype
        self.owner = owner
        self.strides = strides
        self.arrays: dict[int, Any] | None = None

    def __repr__(self) -> str:
        layout = "" if self.strides is None else f" strides={self.strides}"
        return f"<Allocation 0x{self.ptr:x} {self.nbytes} B device={self.device}{layout}>"


class CompositeAllocation(Allocation):
    """One address range whose chunks live on different devices (a composite data
    place). ``chunk_devices[i]`` holds bytes ``[i * chunk, (i + 1) * chunk)``;
    ``pieces`` is what the backend must release (its own format)."""

    __slots__ = ("chunk", "chunk_devices", "pieces")

    def __init__(
        self,
        ptr: int,
        nbytes: int,
        device: int,
        dtype: np.dtype,
        chunk: int,
        chunk_devices: tuple[int, ...],
        pieces: Any = None,
        owner: Any = None,
    ) -> None:
        super().__init__(ptr, nbytes, device, dtype, owner)
        self.chunk = chunk
        self.chunk_devices = chunk_devices
        self.pieces = pieces

    def __repr__(self) -> str:
        return (
            f"<CompositeAllocation 0x{self.ptr:x} {self.nbytes} B over devices "
            f"{sorted(set(self.chunk_devices))}>"
        )


class KernelLaunch:
    """One launch of a ``cuda_kernel`` body, checked and marshalled.

    Attributes
    ----------
    kernel : object
        As the user gave it (a ``cuda.core`` ``Kernel``, a CuPy ``RawKernel``, an
        ``int`` ``CUfunction``; a Python callable on the emulated backend).
    grid, block : tuple of 3 ints
    shmem : int
        Dynamic shared memory in bytes.
    args : tuple
        The arguments as given.
    packed : list of ctypes objects
        The arguments as the kernel receives them (C layout).
    buffers : list of (Allocation, shape, dtype, writable)
        The task's instances (the emulated backend passes arrays of them in place of
        their addresses).
    label : str
        Names the task in error messages.
    """

    __slots__ = ("kernel", "grid", "block", "shmem", "args", "packed", "buffers", "label")

    def __init__(
        self,
        kernel: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shmem: int,
        args: tuple,
        packed: list,
        buffers: list[tuple[Allocation, tuple[int, ...], np.dtype, bool]],
        label: str,
    ) -> None:
        self.kernel = kernel
        self.grid = grid
        self.block = block
        self.shmem = shmem
        self.args = args
        self.packed = packed
        self.buffers = buffers
        self.label = label


class Backend(abc.ABC):
    """The operations the runtime needs from a device.

    Notes
    -----
    All operations taking a ``stream`` are asynchronous and ordered on it, except those
    documented as blocking (``synchronize``). Backends are process-wide singletons
    shared by every context using them (graph mode wraps one in a per-context
    recorder, ``stflow._graph.recording``).
    """

    name: str
    """``"emulated"``, ``"cuda"``, ``"null"``: for messages and ``ctx.backend``."""
    bodies_wait_on_host: bool = False
    """True when a task body may touch its data from the host right after ``start()``
    (on the emulated backend the host waits for the prerequisites when the body first
    takes a view or an address of its data; work it enqueues does not wait)."""
    pinned_host_required: bool = False
    """True when host instances must be page-locked memory (so that device work can
    reach them): a user buffer that :meth:`register_host` cannot page-lock then lives
    at ``USER_PAGEABLE`` and tasks get a runtime-allocated pinned instance."""
    gpu_memory: bool = False
    """True when device memory is CUDA memory: buffers in GPU memory (CUDA Array
    Interface, DLPack CUDA devices) can be registered, and task views are CUDA Array
    Interface objects."""
    cuda_contexts: bool = False
    """True when devices are the CUDA driver's, with its contexts (for messages and
    tests: what places do with SM partitions and contexts goes through
    :meth:`split_device`, :meth:`context_partition`, :meth:`enter_partition` and
    :meth:`locality_domain_count`, which every backend answers)."""
    nvtx_ranges: bool = False
    """True when NVTX ranges mean something here (a profiler can see the work)."""
    guards_reads: bool = False
    """True when the backend checks, at the end of each task, that its ``read()``
    instances are unchanged (:meth:`guard_reads`; the emulated backend)."""
    seed: int | None = None
    """The seed of a backend that randomises its schedule (reported in statistics)."""
    graphs: Any = None
    """Graph construction and launch (a ``_graphs.GraphSupport``), or ``None``."""

    @property
    def native(self) -> Backend:
        """The backend whose streams and memory are real: this one, or for graph
        mode's recording backend the backend it records over."""
        return self

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

    def device_memory(self, device: int) -> int | None:
        """The memory of ``device`` in bytes (``None``: no limit, as on emulated
        devices): the default memory budget of a context."""
        return None

    def machine_init(self) -> None:
        """Prepare the devices (peer access, memory pools); idempotent."""

    # -- streams and events ------------------------------------------------------
    @abc.abstractmethod
    def create_stream(
        self,
        device: int,
        error_sink: Callable[..., None] | None = None,
        partition: Any = None,
    ) -> Stream:
        """Create a stream on ``device`` (``HOST``: a stream for host work) whose
        asynchronous failures go to ``error_sink``.

        ``partition`` (a ``_places.stream_partitions.StreamPartition`` of ``device``,
        or ``None``) asks for a stream in that SM partition or foreign context: its
        work is limited to the partition's SMs. The stream's ``partition`` names it."""

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

    def synchronize_producer(self, handle: int) -> None:
        """Block until the foreign stream ``handle`` is idle (a CUDA Array Interface
        producer's pending work; only backends with :attr:`gpu_memory` get one)."""

    # -- SM partitions and locality domains (green and from_context places) -----
    # What ``stflow._places`` asks to split a device or to bind a place to a
    # context; it never asks which backend it talks to. A partition's ``native`` is
    # the backend's own object, handed back in ``StreamPartition.native`` to
    # :meth:`create_stream` and :meth:`enter_partition`.
    def locality_domain_count(self, device: int) -> int:
        """The locality domains of ``device`` (parts with their own SMs and memory),
        at least 1. The default: the whole device is one domain."""
        return 1

    def split_device(
        self, device: int, sm_count: int, n_places: int | None, coscheduled_sm_count: int
    ) -> list[tuple[Any, int]]:
        """Partition the SMs of ``device`` into groups of ``sm_count`` SMs (rounded
        up to the backend's granularity): exactly ``n_places`` groups, or as many as
        fit when ``None``; ``coscheduled_sm_count`` (``0``: none) is a co-scheduling
        constraint on every group.

        Returns
        -------
        list of (context, int)
            One context per group and its SM count. The context keeps the group
            alive (users get it as ``backing_context``); its ``handle`` is accepted
            by :meth:`context_partition`.

        Raises
        ------
        RuntimeError
            Fewer than ``n_places`` groups fit, or the device cannot be split so.
        GreenContextUnavailableError
            This backend has no SM partitions (the default), or lacks what it needs
            for them (a ``BackendUnavailableError`` naming the extra).
        """
        from .._core.errors import GreenContextUnavailableError

        raise GreenContextUnavailableError(
            f"the {self.name} backend cannot partition device {device}'s SMs (green "
            "contexts); use the cuda or the emulated backend"
        )

    def context_partition(self, context: Any, handle: int) -> tuple[int, Any]:
        """The device of the existing context ``context`` (``handle`` is its handle
        as an int: a ``CUcontext``, or a context of :meth:`split_device`) and the
        ``native`` of a stream partition in it, ``None`` when it is the device's own
        (primary) context: a place bound to it is then a plain device place.

        Raises
        ------
        PlaceError
            ``handle`` is not a context of this backend.
        """
        from .._core.errors import PlaceError

        raise PlaceError(
            f"exec_place.from_context: 0x{handle:x} is not a context of "
            f"the {self.name} backend, which has none; use the cuda or "
            "the emulated backend"
        )

    def enter_partition(self, native: Any) -> None:
        """Make the partition of ``native`` current on the calling thread (what
        ``with place:`` does for a green or ``from_context`` place after setting
        the current device). The default does nothing."""

    # -- memory ------------------------------------------------------------------
    @abc.abstractmethod
    def allocate(
        self, device: int, nbytes: int, stream: Stream | None, dtype: np.dtype
    ) -> Allocation:
        """Allocate ``nbytes`` on ``device`` (``HOST``, ``MANAGED`` or an ordinal).

        Device memory is stream-ordered on ``stream``. ``dtype`` says what the memory
        will hold (the emulated backend poisons it accordingly).
        """

    @abc.abstractmethod
    def free(self, allocation: Allocation, stream: Stream | None) -> None:
        """Free ``allocation``, stream-ordered on ``stream`` when given."""

    def pending_calls(self, stream: Stream) -> bool:
        """True when work, not only markers, is still queued on ``stream`` (the
        backends whose streams a thread of theirs runs: the emulated one)."""
        return False

    def guard_reads(self, plan: Any) -> Any:
        """A guard of ``plan``'s ``read()`` instances, made when a task starts and
        armed when its body first reaches the data (``arm(stream=None)``,
        ``around(fn, task)`` for a body enqueued in stream order), whose
        ``check(stream, task)`` at its end returns the violation to raise, or
        ``None`` (only where :attr:`guards_reads`)."""
        return None

    def free_from_finalizer(self, allocation: Allocation, stream: Stream | None) -> None:
        """:meth:`free` for memory whose owner was collected: ``stream`` may have been
        handed to other work since (a pooled stream), so backends whose streams can
        be capturing into a graph wait for that to end rather than free into it."""
        self.free(allocation, stream)

    def composite_granularity(self, devices: Sequence[int]) -> int:
        """The chunk size, in bytes, of composite allocations over ``devices``."""
        from .._core.errors import PlaceError

        raise PlaceError(f"the {self.name} backend has no composite data places")

    def allocate_composite(
        self,
        device: int,
        chunk_devices: Sequence[int],
        chunk: int,
        nbytes: int,
        dtype: np.dtype,
    ) -> CompositeAllocation:
        """For place number ``device`` (a composite place), one address range of
        ``nbytes`` whose ``i``-th ``chunk`` bytes live on
        ``chunk_devices[i]`` (an ordinal, or ``HOST``), accessible from every device.
        Not stream-ordered: usable at once. :meth:`free` releases it once the work
        enqueued on its stream so far has completed."""
        from .._core.errors import PlaceError

        raise PlaceError(f"the {self.name} backend has no composite data places")

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

    # -- copies and device work --------------------------------------------------
    @abc.abstractmethod
    def copy(
        self,
        dst: int,
        src: int,
        nbytes: int,
        stream: Stream,
        source_ready: bool = False,
    ) -> None:
        """Copy ``nbytes`` from address ``src`` to address ``dst`` in stream order.

        ``source_ready``: every write to the source has completed and none will be
        made before this copy completes, so the backend may read the source now,
        ahead of the stream (the CUDA backend gathers pageable host memory into its
        staging buffers early; the emulated backend reads it at once, so that a
        wrong claim shows as a wrong result)."""

    @abc.abstractmethod
    def copy_strided(
        self,
        dst: int,
        dst_strides: tuple[int, ...] | None,
        src: int,
        src_strides: tuple[int, ...] | None,
        shape: tuple[int, ...],
        itemsize: int,
        stream: Stream,
        source_ready: bool = False,
    ) -> None:
        """Copy the elements of ``shape`` (``itemsize`` bytes each) from the layout
        at ``src`` to the layout at ``dst`` in stream order; strides are in bytes,
        ``None`` for C-contiguous (``stflow._core.layout.pitched`` decomposes the copy into
        2-D pitched copies). Only the elements' bytes are written: the gaps of a
        strided destination keep their values. ``source_ready`` as for
        :meth:`copy`."""

    @abc.abstractmethod
    def fill(self, ptr: int, nbytes: int, pattern: bytes, stream: Stream) -> None:
        """Repeat ``pattern`` over ``nbytes`` at ``ptr`` in stream order."""

    @abc.abstractmethod
    def combine(
        self, dst: int, src: int, count: int, dtype: np.dtype, op: str, stream: Stream
    ) -> None:
        """``dst[i] = op(dst[i], src[i])`` for ``count`` elements of ``dtype``, in
        stream order (both addresses reachable from the stream's device). ``op`` is a
        name of ``stflow._core.reduce.OPS``; reductions combine partial results with it."""

    @abc.abstractmethod
    def launch_host_func(self, stream: Stream, fn: Callable[[], None]) -> None:
        """Run ``fn()`` on a host thread in stream order. ``fn`` must not raise."""

    def launch_kernel(self, stream: Stream, launch: KernelLaunch) -> None:
        """Enqueue ``launch`` on ``stream`` (``cuda_kernel`` bodies).

        Raises
        ------
        BackendUnavailableError
            This backend cannot run kernels of that kind.
        """
        from .._core.errors import BackendUnavailableError

        raise BackendUnavailableError(
            f"{launch.label}: the {self.name} backend cannot launch kernels"
        )

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
    def task_view(
        self,
        allocation: Allocation,
        offset: int,
        shape: tuple[int, ...],
        dtype: np.dtype,
        readonly: bool,
    ) -> ViewLifetime:
        """The view a task body gets of an instance (CAI on CUDA): a
        :class:`~stflow._interchange.views.ViewLifetime`, which the task invalidates when it ends
        and graph mode may refuse host access to."""

    def host_array(
        self,
        allocation: Allocation,
        shape: tuple[int, ...],
        dtype: np.dtype,
        readonly: bool,
    ) -> np.ndarray:
        """A zero-copy NumPy array of host-accessible memory, for a body
        (``host_launch``, ``task.run`` on the emulated backend): a fresh ``view()``
        of an array made once per allocation and access kind (kept in
        ``allocation.arrays``, under ``-1`` writable and ``-2`` read-only), so a
        body costs no array interface of its own. A read-only array's base is
        read-only too: its views cannot be made writable. Like a task view, the
        array must not be kept beyond its task."""
        kept = allocation.arrays
        if kept is None:
            kept = allocation.arrays = {}
        key = -2 if readonly else -1
        base = kept.get(key)
        if base is None or base.shape != shape or base.dtype != dtype:
            base = kept[key] = pointer_array(
                allocation.ptr,
                shape,
                dtype,
                readonly,
                allocation.owner,
                allocation.strides,
            )
        return base.view()

    # -- declared capabilities (nothing is probed by name) -----------------------------
    # Each has a default that is right for a backend without the capability, so the
    # runtime calls them unconditionally.
    def revalidate_contexts(self) -> bool:
        """Renew the device contexts that another library destroyed (a primary
        context reset through Numba or the runtime API); called whenever a context
        is created. Returns ``True`` when one was renewed. Backends without driver
        contexts have nothing to renew."""
        return False

    def launch_callable(
        self, stream: Stream, fn: Callable[..., Any], args: tuple, source: str
    ) -> None:
        """Enqueue ``fn(*args)`` on ``stream`` as device work (``stflow.emulated.launch``
        and ``task.run``, the analog of a kernel launch where device memory is host
        memory). Task views among ``args`` arrive as NumPy arrays of their memory; a
        failure goes to ``stream.error_sink`` with the note ``"raised by {source}"``.

        Raises
        ------
        ScopeError
            Called from work that already runs in stream order.
        BackendUnavailableError
            The backend's device work is not Python (CUDA: launch a kernel).
        """
        from .._core.errors import BackendUnavailableError

        raise BackendUnavailableError(
            f"{source}: the {self.name} backend cannot run Python callables as device "
            "work; launch a kernel (ctx.cuda_kernel) or use t.run(fn), which gives "
            "CuPy arrays on CUDA"
        )

    def set_loop_condition(self, handle: int, value: Any) -> None:
        """Set the condition of a ``while_loop`` (``loop.cond_handle``) from launched
        work: non-zero runs the body again (``stflow.emulated.set_conditional``).

        Raises
        ------
        BackendUnavailableError
            The backend's conditions are set from device code (CUDA:
            ``cudaGraphSetConditional`` in a kernel).
        """
        from .._core.errors import BackendUnavailableError

        raise BackendUnavailableError(
            f"the {self.name} backend sets loop conditions from device code "
            "(cudaGraphSetConditional(handle, value) in a kernel), not from Python"
        )


def poison(buffer: np.ndarray, dtype: np.dtype) -> None:
    """Fill a byte buffer with the pattern of memory nothing was written to: NaN for
    floating types, ``0xA5`` bytes otherwise (fresh and freed memory of the host-memory
    backends, and the value ``wait()`` returns for data never written), so that
    reading it shows."""
    if dtype.kind in "fc" and dtype.itemsize and buffer.nbytes % dtype.itemsize == 0:
        buffer.view(dtype).fill(np.nan)
    else:
        buffer.fill(0xA5)


# -- end of the declared capabilities -------------------------------------------------


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


def pointer_array(
    ptr: int,
    shape: tuple[int, ...],
    dtype: np.dtype,
    readonly: bool,
    owner: Any,
    strides: tuple[int, ...] | None = None,
) -> np.ndarray:
    """A NumPy array of exactly ``dtype`` over ``ptr`` that keeps ``owner`` alive
    (``strides`` in bytes, ``None`` for C order)."""
    if describable(dtype):
        holder = _ArrayInterfaceHolder(
            {
                "version": 3,
                "shape": tuple(shape),
                "typestr": dtype.str,
                "descr": dtype.descr,
                "data": (ptr, readonly),
                "strides": strides,
            },
            owner,
        )
        return np.asarray(holder)
    if strides is not None:  # each element as raw bytes, then the dtype
        raw = np.asarray(
            _ArrayInterfaceHolder(
                {
                    "version": 3,
                    "shape": tuple(shape) + (dtype.itemsize,),
                    "typestr": "|u1",
                    "data": (ptr, readonly),
                    "strides": tuple(strides) + (1,),
                },
                owner,
            )
        )
        return raw.view(dtype)[..., 0]
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.asarray(
        _ArrayInterfaceHolder(
            {
                "version": 3,
                "shape": (nbytes,),
                "typestr": "|u1",
                "data": (ptr, readonly),
                "strides": None,
            },
            owner,
        )
    )
    return raw.view(dtype).reshape(shape)
