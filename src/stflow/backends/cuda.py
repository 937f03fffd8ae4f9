"""The CUDA backend: the backend contract on the CUDA driver API (``cuda.bindings``).

Nothing here is imported by ``import stflow``; :func:`get_backend` loads
``cuda.bindings.driver`` on first use (``_cuda_driver``) and builds one process-wide
:class:`CudaBackend`. It works with cuda-bindings 12.x and 13.x (the ``cu12`` /
``cu13`` extras). Memory (allocation, copies, fills) lives in ``_cuda_memory``;
streams, events and timestamps live in ``_cuda_streams``.

Devices and contexts
    Every visible device's *primary* context is retained once, for the life of the
    process, so stflow shares its contexts with CuPy, PyTorch and Numba. Calls that act
    on a stream use the stream's context; the few calls that need a *current* context
    (pinned and managed allocation, host registration, legacy-stream
    synchronisation) make device 0's primary context current on threads that have
    none. :meth:`CudaBackend.machine_init` (run once, when the backend is created)
    keeps freed pool memory cached and enables peer access between devices.
    Another library may still destroy a primary context (``cuDevicePrimaryCtxReset``,
    as ``numba.cuda.get_current_device().reset()`` does): every context creation
    calls :meth:`CudaBackend.revalidate_contexts`, which notices the change by the
    context's id and retains the new primary context.

Host callbacks
    :meth:`CudaBackend.launch_host_func` enqueues one C trampoline (a ``ctypes``
    callback made once) with an integer key as user data; the trampoline pops the
    Python callable registered under that key, so each callable lives exactly until
    it has run. While it runs, ``callback_state.active`` is set on the driver's
    callback thread, which makes submitting work from a callback raise
    ``ScopeError``. Blocking calls of cuda-bindings 13 release the GIL, so the host
    may block while callbacks are pending; with older bindings the backend polls.
    A callable enqueued on a stream that is capturing into a CUDA graph becomes a
    host node, run at every launch: it stays registered until the graph and its
    executables are gone (``_cuda_graphs``).

Graphs
    :attr:`CudaBackend.graphs` builds CUDA graphs by stream capture and launches them
    (``_cuda_graphs``, the graph-mode contract of ``_graphs``). ``_captures`` maps
    each capturing stream to its capture, so that host callbacks and deferred
    releases enqueued on it follow the graph's lifetime instead of one run.

Errors
    A failing driver call raises :class:`~stflow.errors.CudaError` naming the step and
    the device, with the driver's error ``name`` and ``code``;
    ``CUDA_ERROR_OUT_OF_MEMORY`` raises a subclass that is also a ``MemoryError``.
"""

from __future__ import annotations

import ctypes
import itertools
import sys
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from .._core.errors import BackendUnavailableError, DeviceOrdinalError
from .._interchange.views import TaskView
from . import _cuda_driver as _cu
from ._base import Allocation, Backend, KernelLaunch, Stream, callback_state
from ._cuda_driver import CudaOutOfMemoryError
from ._cuda_graphs import CudaGraphSupport
from ._cuda_green import CudaPartitions
from ._cuda_kernels import KernelCache, combine_source, kernel_params
from ._cuda_memory import CudaMemory
from ._cuda_streams import CudaStreams, DriverStream

__all__ = ["CudaBackend", "CudaOutOfMemoryError", "get_backend"]

_HOST_FN_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class CudaBackend(CudaStreams, CudaMemory, CudaPartitions, Backend):
    """The backend contract on the CUDA driver (see the module docstring).

    Build it with :func:`get_backend`, never directly.
    """

    name = "cuda"
    bodies_wait_on_host = False
    pinned_host_required = True
    gpu_memory = True
    cuda_contexts = True
    nvtx_ranges = True

    def __init__(self) -> None:
        d = _cu.driver
        check = _cu.check
        self._count = int(check(d.cuDeviceGetCount(), "cuDeviceGetCount"))
        self._devices = [
            check(d.cuDeviceGet(i), f"cuDeviceGet({i})") for i in range(self._count)
        ]
        self._contexts = [
            check(
                d.cuDevicePrimaryCtxRetain(dev),
                f"retaining the primary context of device {i}",
            )
            for i, dev in enumerate(self._devices)
        ]
        self._context_device = {int(ctx): i for i, ctx in enumerate(self._contexts)}
        self._context_ids = [self._context_id(ctx) for ctx in self._contexts]
        self._pools = [
            check(
                d.cuDeviceGetDefaultMemPool(dev),
                f"cuDeviceGetDefaultMemPool on device {i}",
            )
            for i, dev in enumerate(self._devices)
        ]
        self._properties = [self._read_properties(i) for i in range(self._count)]
        self._event_pools: list[list[Any]] = [[] for _ in range(self._count)]
        self._free_streams: list[list[Any]] = [[] for _ in range(self._count)]
        self._generation = 0  # bumped when primary contexts are renewed
        self._streams: weakref.WeakValueDictionary[int, DriverStream] = (
            weakref.WeakValueDictionary()
        )
        self._foreign: dict[Any, DriverStream] = {}
        self._lock = threading.Lock()
        self._initialized = False
        self._host_funcs: dict[int, tuple[Callable[[], None], Stream, bool]] = {}
        self._captures: dict[int, Any] = {}  # capturing stream -> _Capture
        self._host_keys = itertools.count(1)
        self._trampoline = _HOST_FN_TYPE(self._run_host_func)
        self._host_fn = d.CUhostFn(ctypes.cast(self._trampoline, ctypes.c_void_p).value)
        self._blocking_releases_gil = _cu.releases_gil()
        # The hot path: driver functions bound once.
        self._cuEventRecord = d.cuEventRecord
        self._cuStreamWaitEvent = d.cuStreamWaitEvent
        self._cuEventQuery = d.cuEventQuery
        self._cuEventSynchronize = d.cuEventSynchronize
        self._cuLaunchHostFunc = d.cuLaunchHostFunc
        self._init_memory()
        self._ensure_context()
        self._service = [self._new_stream(i) for i in range(self._count)]
        self._timing_pools: list[list[Any]] = [[] for _ in range(self._count)]
        self._time_origins = [self._time_origin(i) for i in range(self._count)]
        self.kernels = KernelCache(self)
        self.graphs = CudaGraphSupport(self)

    # -- contexts ----------------------------------------------------------------
    @staticmethod
    def _context_id(ctx: Any) -> int | None:
        """The process-unique id of context ``ctx`` (``cuCtxGetId``, CUDA 12.0+);
        ``None`` when the context was destroyed (or the driver cannot say)."""
        d = _cu.driver
        get_id = getattr(d, "cuCtxGetId", None)
        if get_id is None:
            err, _ = d.cuCtxGetApiVersion(ctx)
            return 0 if err == d.CUresult.CUDA_SUCCESS else None
        err, ident = get_id(ctx)
        return int(ident) if err == d.CUresult.CUDA_SUCCESS else None

    def revalidate_contexts(self) -> bool:
        """Re-retain the primary contexts that another framework destroyed.

        ``numba.cuda.get_current_device().reset()`` (``cuDevicePrimaryCtxReset``)
        destroys a primary context even while stflow retains it; the driver makes a
        new one on the next retain, with a new id. Called when a context is created:
        a device whose context is gone (or has another id) gets its retain balanced
        and renewed, and everything stflow made in the old context (streams, events,
        loaded kernels, staging memory, peer access) is forgotten. Returns ``True``
        when a context was renewed.

        Notes
        -----
        Contexts of stflow still alive across such a reset cannot be saved: their
        streams and memory went with the old context.
        """
        stale = [
            i
            for i, ctx in enumerate(self._contexts)
            if self._context_ids[i] is None
            or self._context_id(ctx) != self._context_ids[i]
        ]
        if not stale:
            return False
        d = _cu.driver
        check = _cu.check
        with self._lock:
            for i in stale:
                dev = self._devices[i]
                # No release first: the count is per device, not per incarnation, and
                # another library (the one that reset it) may hold the new context
                # already; one more retain keeps it alive for the process, as ours did.
                ctx = check(
                    d.cuDevicePrimaryCtxRetain(dev),
                    f"retaining the primary context of device {i} again "
                    "(it was reset by another library)",
                )
                self._contexts[i] = ctx
                self._context_ids[i] = self._context_id(ctx)
                self._pools[i] = check(
                    d.cuDeviceGetDefaultMemPool(dev),
                    f"cuDeviceGetDefaultMemPool on device {i}",
                )
                # Made in the destroyed context: gone with it. New lists, not
                # emptied ones: objects of the old context still hold the old lists
                # and return their (dead) streams and events to those.
                self._free_streams[i] = []
                self._event_pools[i] = []
                self._timing_pools[i] = []
            self._generation += 1
            self._context_device = {int(ctx): i for i, ctx in enumerate(self._contexts)}
            self._foreign.clear()
            self._captures.clear()
            self._initialized = False
        self._init_memory()
        current = _cu.check(d.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if not int(current) or self._context_id(current) is None:
            _cu.check(
                d.cuCtxSetCurrent(self._contexts[0]),
                "making device 0's primary context current",
            )
        for i in stale:
            self._service[i] = self._new_stream(i)
            self._time_origins[i] = self._time_origin(i)
        self.kernels = KernelCache(self)
        self.machine_init()
        return True

    def _ensure_context(self) -> None:
        """Make device 0's primary context current if the thread has no context."""
        ctx = _cu.check(_cu.driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if not int(ctx):
            _cu.check(
                _cu.driver.cuCtxSetCurrent(self._contexts[0]),
                "making device 0's primary context current",
            )

    def _push(self, device: int) -> None:
        _cu.check(
            _cu.driver.cuCtxPushCurrent(self._contexts[device]),
            f"making device {device}'s primary context current",
        )

    def _pop(self, device: int) -> None:
        _cu.check(
            _cu.driver.cuCtxPopCurrent(),
            f"restoring the context after using device {device}",
        )

    def _read_properties(self, device: int) -> tuple[str, int, int, int]:
        d = _cu.driver
        dev = self._devices[device]
        step = f"reading the properties of device {device}"
        name = _cu.check(d.cuDeviceGetName(256, dev), step)
        name = name.split(b"\0", 1)[0].decode() if isinstance(name, bytes) else str(name)
        attribute = d.CUdevice_attribute
        major = _cu.check(
            d.cuDeviceGetAttribute(
                attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev
            ),
            step,
        )
        minor = _cu.check(
            d.cuDeviceGetAttribute(
                attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev
            ),
            step,
        )
        total = _cu.check(d.cuDeviceTotalMem(dev), step)
        return name, int(major), int(minor), int(total)

    # -- devices -----------------------------------------------------------------
    @property
    def device_count(self) -> int:
        return self._count

    def device_memory(self, device: int) -> int | None:
        return int(self._properties[device][3])

    def describe(self) -> str:
        devices = ", ".join(
            f"{name} (sm_{major}{minor}, {round(total / 2**30)} GiB)"
            for name, major, minor, total in self._properties
        )
        return f"cuda backend, {self._count} device(s): {devices}"

    def current_device(self) -> int:
        """The device of the calling thread's current context (0 when it has none)."""
        if self._count == 1:
            return 0
        ctx = _cu.check(_cu.driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
        handle = int(ctx)
        if not handle:
            return 0
        device = self._context_device.get(handle)
        if device is None:  # not a primary context: ask for its device
            device = int(_cu.check(_cu.driver.cuCtxGetDevice(), "cuCtxGetDevice"))
        return device

    def set_current_device(self, device: int) -> None:
        """Make ``device``'s primary context current on the calling thread."""
        self._check_ordinal(device, "set_current_device")
        _cu.check(
            _cu.driver.cuCtxSetCurrent(self._contexts[device]),
            f"making device {device}'s primary context current",
        )

    def _check_ordinal(self, device: int, what: str) -> None:
        if not 0 <= device < self._count:
            raise DeviceOrdinalError(
                f"{what}: invalid device id {device}: device "
                f"{device} does not exist on the cuda backend "
                f"({self._count} device(s))"
            )

    def machine_init(self) -> None:
        """Enable peer access between devices and configure the memory pools.

        Idempotent. Each device's default pool keeps freed memory cached (release
        threshold at its maximum; :meth:`trim_pools` gives it back) and, where
        ``cuDeviceCanAccessPeer`` allows it, is made accessible to the other devices,
        whose contexts get peer access.

        Raises
        ------
        CudaError
            A driver call failed; the message names the step and the devices.
        """
        if self._initialized:
            return
        with self._lock:
            if self._initialized:
                return
            d = _cu.driver
            threshold = d.cuuint64_t(2**64 - 1)
            attribute = d.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
            for device, pool in enumerate(self._pools):
                _cu.check(
                    d.cuMemPoolSetAttribute(pool, attribute, threshold),
                    f"setting the memory pool release threshold of device {device}",
                )
            for device in range(self._count):
                for peer in range(self._count):
                    if peer != device:
                        self._enable_peer(device, peer)
            self._initialized = True

    def _enable_peer(self, device: int, peer: int) -> None:
        """Let ``device`` access ``peer``'s memory (contexts and pool), if possible."""
        d = _cu.driver
        can = _cu.check(
            d.cuDeviceCanAccessPeer(self._devices[device], self._devices[peer]),
            f"asking whether device {device} can access device {peer}",
        )
        if not can:
            return
        self._push(device)
        try:
            (err,) = d.cuCtxEnablePeerAccess(self._contexts[peer], 0)
            if err and err != d.CUresult.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:
                raise _cu.error(
                    err, f"enabling peer access from device {device} to device {peer}"
                ) from None
        finally:
            self._pop(device)
        access = d.CUmemAccessDesc()
        access.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        access.location.id = device
        access.flags = d.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        _cu.check(
            d.cuMemPoolSetAccess(self._pools[peer], [access], 1),
            f"granting device {device} access to device {peer}'s memory pool",
        )

    # -- reductions ----------------------------------------------------------------
    def combine(
        self, dst: int, src: int, count: int, dtype: np.dtype, op: str, stream: Stream
    ) -> None:
        """An NVRTC kernel (one per operation and dtype, compiled once) on the
        stream's device: a grid-stride loop of 256-thread blocks."""
        if not count:
            return
        device = stream.ordinal
        function = self.kernels.function(
            combine_source(op, np.dtype(dtype).name), "stflow_combine", device
        )
        blocks = min((count + 255) // 256, 65535)
        args = [ctypes.c_uint64(dst), ctypes.c_uint64(src), ctypes.c_uint64(count)]
        array = kernel_params(args)
        _cu.check(
            _cu.driver.cuLaunchKernel(
                function,
                blocks,
                1,
                1,
                256,
                1,
                1,
                0,
                stream.native,  # type: ignore[attr-defined]
                ctypes.addressof(array),
                0,
            ),
            f"combining reduction results ({op}) on {stream!r}",
        )

    # -- host callbacks ----------------------------------------------------------
    def launch_host_func(self, stream: Stream, fn: Callable[[], None]) -> None:
        """Run ``fn()`` on the driver's callback thread, in stream order.

        Notes
        -----
        ``fn`` is kept until it has run. While it runs ``callback_state.active`` is
        set, so it cannot submit work or block on the device; an exception escaping
        it goes to ``stream.error_sink``. On a stream capturing into a graph, ``fn``
        becomes a host node: it runs at every launch and is kept until the graph and
        its executables are released.

        Raises
        ------
        ScopeError
            The stream is capturing the body of a loop, which cannot hold host nodes.
        """
        capture = self._captures.get(stream.handle) if self._captures else None
        key = next(self._host_keys)
        if capture is not None:
            self._refuse_host_work(stream, "a host callback")
            self._host_funcs[key] = (fn, stream, True)
            try:
                self.graphs.capture_host_node(stream, self._host_fn, key)
            except BaseException:
                del self._host_funcs[key]
                raise
            capture.resources.releases.append(lambda: self._host_funcs.pop(key, None))
            return
        self._host_funcs[key] = (fn, stream, False)
        (err,) = self._cuLaunchHostFunc(stream.native, self._host_fn, key)  # type: ignore
        if err:
            del self._host_funcs[key]
            raise _cu.error(err, f"cuLaunchHostFunc on {stream!r}") from None

    def _run_host_func(self, key: int | None) -> None:
        """The C trampoline's body: never lets an exception reach the driver."""
        try:
            entry = self._host_funcs.get(key or 0)
            if entry is None:
                return
            fn, stream, kept = entry
            if not kept:  # a host node of a graph runs at every launch
                self._host_funcs.pop(key or 0, None)
            state = callback_state
            previous = state.active
            state.active = True
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - reported, never lost
                sink = stream.error_sink
                if sink is not None:
                    sink(exc)
                else:
                    warnings.warn(
                        f"stflow: a host callback with no owner raised {exc!r}",
                        RuntimeWarning,
                        stacklevel=1,
                    )
            finally:
                state.active = previous
        except BaseException:  # noqa: BLE001 - nothing may escape into the driver
            pass

    # -- kernels -------------------------------------------------------------------
    def launch_kernel(self, stream: Stream, launch: KernelLaunch) -> None:
        """``cuLaunchKernel`` of ``launch`` on ``stream`` (see ``KernelLaunch``).

        ``launch.kernel`` is a ``cuda.core`` ``Kernel`` (a ``CUkernel`` is resolved to
        the ``CUfunction`` of the stream's device), a CuPy ``RawKernel`` (its compiled
        function for that device), a ``CUfunction`` or an ``int`` ``CUfunction``.

        Raises
        ------
        TypeError
            Another kind of kernel.
        BackendUnavailableError
            ``cuda.core`` is not installed.
        CudaError
            The driver refused the launch.
        """
        if "cuda.core" not in sys.modules:
            try:
                import cuda.core  # noqa: F401
            except ImportError as exc:
                raise BackendUnavailableError(
                    "cuda_kernel.launch needs cuda.core; install stflow[cu12] or "
                    "stflow[cu13] (cuda-core)"
                ) from exc
        native: Any = stream.native  # type: ignore[attr-defined]
        function = self._function(launch.kernel, stream.ordinal, launch.label)
        packed = launch.packed
        pointers = (ctypes.c_void_p * max(len(packed), 1))(
            *[ctypes.addressof(value) for value in packed]
        )
        _cu.check(
            _cu.driver.cuLaunchKernel(
                function,
                *launch.grid,
                *launch.block,
                launch.shmem,
                native,
                ctypes.addressof(pointers) if packed else 0,
                0,
            ),
            f"{launch.label}: cuLaunchKernel",
        )

    def _function(self, kernel: Any, device: int, label: str) -> Any:
        """The ``CUfunction`` of ``kernel`` for ``device``."""
        driver = _cu.driver
        if isinstance(kernel, bool):
            raise TypeError(
                "launch: kernel must be a cuda.core Kernel, a CuPy "
                "RawKernel or an int CUfunction, got bool"
            )
        if isinstance(kernel, int):
            return driver.CUfunction(kernel)
        if isinstance(kernel, driver.CUfunction):
            return kernel
        resolve: Callable[[], Any] | None = None
        handle = getattr(kernel, "handle", None)
        if handle is not None and (type(kernel).__module__ or "").startswith("cuda.core"):
            if isinstance(handle, driver.CUfunction):
                return handle
            if isinstance(handle, driver.CUkernel):

                def resolve() -> Any:
                    return _cu.check(
                        driver.cuKernelGetFunction(handle),
                        f"{label}: resolving a CUkernel to the "
                        f"CUfunction of device {device}",
                    )
            else:
                return driver.CUfunction(int(handle))
        elif hasattr(kernel, "kernel") and (type(kernel).__module__ or "").startswith(
            "cupy"
        ):

            def resolve() -> Any:
                return driver.CUfunction(int(kernel.kernel.ptr))

        if resolve is None:
            raise TypeError(
                f"launch: kernel must be a cuda.core Kernel, a CuPy "
                f"RawKernel or an int CUfunction on the CUDA backend, got "
                f"{type(kernel).__name__}"
            )
        previous = self.current_device()
        self.set_current_device(device)  # also when the thread has no context
        try:
            return resolve()
        finally:
            if previous != device:
                self.set_current_device(previous)

    # -- views -------------------------------------------------------------------
    def task_view(
        self,
        allocation: Allocation,
        offset: int,
        shape: tuple[int, ...],
        dtype: np.dtype,
        readonly: bool,
    ) -> TaskView:
        """A CUDA Array Interface view advertising no stream (an ``stf_cai`` valid
        until the task ends)."""
        return TaskView(
            allocation.ptr + offset, shape, dtype, 0, readonly, allocation.strides
        )


_backend: CudaBackend | None = None
_unavailable: str | None = None
_backend_lock = threading.Lock()


def get_backend() -> CudaBackend:
    """The process-wide CUDA backend, created (and ``machine_init``-ed) on first use.

    Raises
    ------
    BackendUnavailableError
        ``cuda.bindings`` is not installed, the driver cannot be loaded or
        initialised, or no device is visible. The message says which, and names the
        ``stflow[cu12]`` / ``stflow[cu13]`` extras. The answer is remembered.
    CudaError
        A driver call failed while setting the devices up.
    """
    backend = _backend
    if backend is not None:
        return backend
    return _create()


def _create() -> CudaBackend:
    global _backend, _unavailable
    with _backend_lock:
        if _backend is not None:
            return _backend
        if _unavailable is not None:
            raise BackendUnavailableError(_unavailable)
        try:
            _cu.load()
        except BackendUnavailableError as exc:
            _unavailable = str(exc)
            raise
        backend = CudaBackend()
        backend.machine_init()
        _backend = backend
        return backend
