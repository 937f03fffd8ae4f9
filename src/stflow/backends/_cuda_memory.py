"""Memory of the CUDA backend: allocation, location, copies, fills, deferred releases.

:class:`CudaMemory` is the memory half of :class:`~stflow.backends.cuda.CudaBackend`
(a mixin: it uses the backend's pools, service streams, event pools and host
callbacks).

Places
    Device memory comes from each device's default memory pool, stream-ordered
    (``cuMemAllocFromPoolAsync`` / ``cuMemFreeAsync``). Host places use portable
    pinned memory (``cuMemHostAlloc``), managed places ``cuMemAllocManaged``.

Deferred releases
    Pinned and managed memory cannot be freed in stream order. A stream-ordered free
    records an event instead, and the memory is released once the event has
    completed; the list is checked at later allocations, frees and synchronisations.
    Pinned staging buffers of pageable copies go the same way, back to a small cache.

Copies never block and are always stream-ordered
    ``cuMemcpyAsync`` reads a *pageable* source when it is called (not in stream
    order), blocks the host until the stream drains for a pageable destination, and
    is synchronous between host buffers. So :meth:`CudaMemory.copy` classifies both
    addresses first: device-accessible memory on both sides is one
    ``cuMemcpyAsync``; pageable memory against device memory goes through pinned
    chunks that host threads fill and drain, the streams waiting on flags
    (``_cuda_staging``; in a graph, one staging buffer whose host half is a
    ``memmove`` in a host node); host memory on both sides is one ``memmove`` in a
    host callback. The runtime calls copies while holding its lock, so a copy that
    blocked could deadlock against a host callback.

Fills
    The pattern is reduced to its shortest period: 1, 2 or 4 bytes become one
    ``cuMemsetD8/D16/D32Async``; up to 16 bytes, one strided 2D memset per 1, 2 or
    4-byte column; longer patterns are copied once from a pinned tile and doubled
    with device copies. Pageable memory (and pinned memory for long patterns) is
    filled with NumPy in a host callback.

Graph capture
    On a stream capturing into a CUDA graph (``_cuda_graphs``) the same calls become
    graph nodes that run at every launch: a host callback becomes a host node, and a
    deferred release (a staging buffer, the pinned tile of a long fill pattern) waits
    for the graph and its executables to be released instead of for the stream.
    Pageable copies therefore read and write the user's buffer at every launch, in
    graph order. A loop body cannot hold host nodes: the copies and fills that need a
    host callback raise ``ScopeError`` there, before enqueuing anything.
"""

from __future__ import annotations

import ctypes
import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._core.errors import PlaceError, ScopeError
from .._core.layout import pitched
from . import _cuda_driver as _cu
from ._base import HOST, MANAGED, Allocation, CompositeAllocation, Stream
from ._cuda_host_locks import CudaHostLocks
from ._cuda_staging import Stager
from ._host_memory import copy_elements

__all__ = ["CudaMemory"]

DEVICE, MANAGED_MEMORY, PINNED, PAGEABLE = range(4)
"""What :meth:`CudaMemory.pointer_kind` says an address is."""
_STAGING_CACHE = 64 << 20
"""Bytes of pinned staging buffers kept for reuse."""
_MAX_STRIDED_PERIOD = 16
"""Fill patterns up to this many bytes use strided 2D memsets."""
_MAX_PITCH = (1 << 31) - 1
"""The largest pitch of a 2-D copy the driver takes (wider rows: 1-D copies)."""
_FREED = object()
"""``Allocation.owner`` once the backend released the memory (double-free guard)."""


class CudaMemory(CudaHostLocks):
    """Memory operations of the backend contract on the CUDA driver (a mixin; the
    page-locking of user host memory is :class:`~._cuda_host_locks.CudaHostLocks`)."""

    _pools: list[Any]
    _service: list[Any]
    _context_device: dict[int, int]
    _captures: dict[int, Any]
    _ensure_context: Callable[[], None]
    _new_event: Callable[[int], Any]
    launch_host_func: Callable[[Stream, Callable[[], None]], None]

    def _init_memory(self) -> None:
        d = _cu.driver
        attribute = d.CUpointer_attribute
        self._locate_attributes = [
            attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            attribute.CU_POINTER_ATTRIBUTE_IS_MANAGED,
            attribute.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
            attribute.CU_POINTER_ATTRIBUTE_CONTEXT,
        ]
        self._pool_device = {int(pool): i for i, pool in enumerate(self._pools)}
        self._kind_attributes = [
            attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            attribute.CU_POINTER_ATTRIBUTE_IS_MANAGED,
        ]
        self._memorytype_device = int(d.CUmemorytype.CU_MEMORYTYPE_DEVICE)
        self._memorytype_host = int(d.CUmemorytype.CU_MEMORYTYPE_HOST)
        self._invalid_value = d.CUresult.CUDA_ERROR_INVALID_VALUE
        self._not_ready = d.CUresult.CUDA_ERROR_NOT_READY
        self._deferred: list[tuple[Any, list, Callable[[], None] | None]] = []
        self._deferred_lock = threading.Lock()
        self._staging_free: dict[int, list[int]] = {}
        self._staging_cached = 0
        # What this backend allocated, by base address (a copy between its own
        # buffers asks the driver nothing): entries go at ``free``, before the
        # address can be handed out again.
        self._own_kind: dict[int, int] = {}
        self._stager = Stager(self)
        self._init_host_locks()

    # -- allocation ----------------------------------------------------------------
    def allocate(
        self, device: int, nbytes: int, stream: Stream | None, dtype: np.dtype
    ) -> Allocation:
        """Allocate ``nbytes`` at ``device`` (an ordinal, ``HOST`` or ``MANAGED``).

        Notes
        -----
        Device memory is stream-ordered on ``stream``: usable by work enqueued on it
        afterwards. When ``stream`` is ``None`` or belongs to another device, the
        memory is allocated through the device's own service stream and is usable by
        any stream on return (so the driver also records the right device for it).
        Host memory is portable pinned memory, managed memory is attached globally;
        both are usable at once. ``nbytes == 0`` gives a null pointer.
        """
        if not nbytes:
            return Allocation(0, 0, device, dtype, None)
        d = _cu.driver
        if device >= 0:
            step = f"allocating {nbytes} bytes on device {device}"
            if stream is not None and stream.ordinal == device:
                err, ptr = d.cuMemAllocFromPoolAsync(
                    nbytes,
                    self._pools[device],
                    stream.native,  # type: ignore[attr-defined]
                )
                if err:
                    raise _cu.error(err, step) from None
            else:  # no stream, or another device's: allocate ready for use
                service = self._service[device]
                ptr = _cu.check(
                    d.cuMemAllocFromPoolAsync(nbytes, self._pools[device], service), step
                )
                _cu.check(d.cuStreamSynchronize(service), step)
            self._own_kind[int(ptr)] = DEVICE
            return Allocation(int(ptr), nbytes, device, dtype, None)
        self._reap()
        self._ensure_context()
        if device == HOST:
            flags = d.CU_MEMHOSTALLOC_PORTABLE | d.CU_MEMHOSTALLOC_DEVICEMAP
            ptr = _cu.check(
                d.cuMemHostAlloc(nbytes, flags),
                f"allocating {nbytes} bytes of pinned host memory",
            )
        elif device == MANAGED:
            ptr = _cu.check(
                d.cuMemAllocManaged(
                    nbytes, int(d.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL)
                ),
                f"allocating {nbytes} bytes of managed memory",
            )
        else:
            raise PlaceError(
                f"cannot allocate memory at place {device}; use a device "
                "ordinal, HOST or MANAGED"
            )
        self._own_kind[int(ptr)] = PINNED if device == HOST else MANAGED_MEMORY
        return Allocation(int(ptr), nbytes, device, dtype, None)

    def free(self, allocation: Allocation, stream: Stream | None) -> None:
        """Free memory of :meth:`allocate`, stream-ordered on ``stream`` when given.

        Notes
        -----
        Device memory goes back to its pool with ``cuMemFreeAsync``. Pinned and
        managed memory is released once the work enqueued on ``stream`` so far has
        completed (at once when ``stream`` is ``None``). Freeing twice, or a null
        allocation, does nothing.
        """
        ptr = allocation.ptr
        if not ptr or allocation.owner is _FREED:
            return
        allocation.owner = _FREED
        self._own_kind.pop(ptr, None)
        if isinstance(allocation, CompositeAllocation):  # unmapped once idle
            size, pieces = allocation.pieces
            if stream is None:
                self._release_composite(ptr, size, pieces)
            else:
                self._defer(stream, lambda: self._release_composite(ptr, size, pieces))
            self._reap()
            return
        device = allocation.device
        if device >= 0:
            native = self._service[device] if stream is None else stream.native  # type: ignore[attr-defined]
            (err,) = _cu.driver.cuMemFreeAsync(ptr, native)
            if err:
                raise _cu.error(err, f"freeing {allocation!r}") from None
            return
        if stream is None:
            self._release_host(device, ptr)
        else:
            self._defer(stream, lambda: self._release_host(device, ptr))
        self._reap()

    def free_from_finalizer(self, allocation: Allocation, stream: Stream | None) -> None:
        """:meth:`free` from a finalizer: a stream capturing into a graph now (a
        pooled stream lent to other work since) gets no free node, whose memory the
        graph never allocated (``CUDA_ERROR_NOT_PERMITTED``): the memory is freed once
        that graph is released instead."""
        if (
            stream is not None
            and self._captures
            and self._captures.get(stream.handle) is not None
        ):
            self._defer(stream, lambda: self.free(allocation, None))
            return
        self.free(allocation, stream)

    # -- composite places: one virtual range, pages on several devices -------------------
    def _allocation_prop(self, device: int) -> Any:
        d = _cu.driver
        prop = d.CUmemAllocationProp()
        prop.type = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = device
        return prop

    def composite_granularity(self, devices: Sequence[int]) -> int:
        """The largest minimum VMM granularity of ``devices`` (2 MiB on current
        GPUs): composite chunks are mapped whole on one device."""
        d = _cu.driver
        self._ensure_context()
        granularity = 1
        for device in set(devices) or {0}:
            if device < 0:
                continue
            value = _cu.check(
                d.cuMemGetAllocationGranularity(
                    self._allocation_prop(device),
                    d.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM,
                ),
                f"asking the allocation granularity of device {device}",
            )
            granularity = max(granularity, int(value))
        return granularity

    def allocate_composite(
        self,
        device: int,
        chunk_devices: Sequence[int],
        chunk: int,
        nbytes: int,
        dtype: np.dtype,
    ) -> CompositeAllocation:
        """Reserve one virtual range and map each run of chunks of one device on
        physical memory of that device (``cuMemCreate`` / ``cuMemMap``); every device
        gets read-write access (``cuMemSetAccess``), so a body sees one array and a
        copy engine of any device can fill it."""
        d = _cu.driver
        if any(owner < 0 for owner in chunk_devices):
            raise PlaceError(
                "a composite place of the CUDA backend spreads data over "
                "device memory only; use a grid of device places"
            )
        self._ensure_context()
        size = len(chunk_devices) * chunk
        ptr = int(
            _cu.check(
                d.cuMemAddressReserve(size, chunk, 0, 0),
                f"reserving {size} bytes of virtual addresses",
            )
        )
        pieces: list[tuple[int, int, Any]] = []  # (offset, bytes, handle)
        try:
            start = 0
            while start < len(chunk_devices):
                owner = chunk_devices[start]
                end = start
                while end < len(chunk_devices) and chunk_devices[end] == owner:
                    end += 1
                run = (end - start) * chunk
                handle = _cu.check(
                    d.cuMemCreate(run, self._allocation_prop(owner), 0),
                    f"creating {run} bytes of memory on device {owner}",
                )
                try:
                    _cu.check(
                        d.cuMemMap(ptr + start * chunk, run, 0, handle, 0),
                        f"mapping {run} bytes of device {owner}",
                    )
                except BaseException:
                    d.cuMemRelease(handle)
                    raise
                pieces.append((start * chunk, run, handle))
                start = end
            access = []
            for peer in range(len(self._pools)):
                desc = d.CUmemAccessDesc()
                desc.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
                desc.location.id = peer
                desc.flags = d.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                access.append(desc)
            _cu.check(
                d.cuMemSetAccess(ptr, size, access, len(access)),
                "giving every device access to a composite range",
            )
        except BaseException:
            self._release_composite(ptr, size, pieces)
            raise
        return CompositeAllocation(
            ptr, nbytes, device, dtype, chunk, tuple(chunk_devices), (size, tuple(pieces))
        )

    def _release_composite(
        self, ptr: int, size: int, pieces: Sequence[tuple[int, int, Any]]
    ) -> None:
        d = _cu.driver
        self._ensure_context()
        for offset, run, handle in pieces:
            d.cuMemUnmap(ptr + offset, run)
            d.cuMemRelease(handle)
        _cu.check(
            d.cuMemAddressFree(ptr, size),
            f"freeing the virtual range of a composite instance at 0x{ptr:x}",
        )

    def _release_host(self, device: int, ptr: int) -> None:
        self._ensure_context()
        if device == HOST:
            _cu.check(
                _cu.driver.cuMemFreeHost(ptr), f"freeing pinned host memory at 0x{ptr:x}"
            )
        else:
            _cu.check(_cu.driver.cuMemFree(ptr), f"freeing managed memory at 0x{ptr:x}")

    def trim_pools(self) -> None:
        """Give the memory cached by the device pools back to the driver.

        Notes
        -----
        Only memory whose stream-ordered free has completed is released; synchronise
        first (finalize the contexts) to release everything.
        """
        for device, pool in enumerate(self._pools):
            _cu.check(
                _cu.driver.cuMemPoolTrimTo(pool, 0),
                f"trimming the memory pool of device {device}",
            )

    # -- where memory is ---------------------------------------------------------------
    def locate(self, ptr: int) -> int:
        """``HOST``, ``MANAGED`` or the ordinal of the device holding ``ptr``.

        Unregistered (pageable) host memory is ``HOST``.

        Notes
        -----
        For memory-pool allocations the driver's ``DEVICE_ORDINAL`` attribute
        names the calling thread's current device, not the pool's, so the device
        is found from the pool (the devices' default pools) or from the owning
        context before falling back to that attribute.
        """
        err, values = _cu.driver.cuPointerGetAttributes(
            len(self._locate_attributes), self._locate_attributes, ptr
        )
        if err:
            if err == self._invalid_value:
                return HOST
            raise _cu.error(err, f"locating the memory at 0x{ptr:x}") from None
        memory_type, ordinal, managed, pool, context = values
        if int(managed):
            return MANAGED
        if int(memory_type) != self._memorytype_device:
            return HOST
        device = self._pool_device.get(int(pool)) if pool is not None else None
        if device is None and context is not None and int(context):
            device = self._context_device.get(int(context))
        return int(ordinal) if device is None else device

    def pointer_kind(self, ptr: int) -> int:
        """``DEVICE``, ``MANAGED_MEMORY``, ``PINNED`` or ``PAGEABLE``."""
        kind = self._own_kind.get(ptr)
        if kind is not None:  # the base of one of our allocations
            return kind
        err, values = _cu.driver.cuPointerGetAttributes(2, self._kind_attributes, ptr)
        if err:
            if err == self._invalid_value:
                return PAGEABLE
            raise _cu.error(err, f"classifying the memory at 0x{ptr:x}") from None
        memory_type, managed = values
        if int(managed):
            return MANAGED_MEMORY
        memory_type = int(memory_type)
        if memory_type == self._memorytype_device:
            return DEVICE
        return PINNED if memory_type == self._memorytype_host else PAGEABLE

    def is_pinned(self, ptr: int, nbytes: int) -> bool:
        """True when both ends of the range are page-locked (registered elsewhere)."""
        return (
            self.pointer_kind(ptr) == PINNED
            and self.pointer_kind(ptr + max(nbytes, 1) - 1) == PINNED
        )

    # -- copies ------------------------------------------------------------------------
    def copy(
        self,
        dst: int,
        src: int,
        nbytes: int,
        stream: Stream,
        source_ready: bool = False,
    ) -> None:
        """Copy ``nbytes`` from ``src`` to ``dst`` in stream order, without blocking.

        Notes
        -----
        See the module docstring: pageable memory is read and written by host
        threads in stream order (``_cuda_staging``), never by the driver at call
        time; a ``source_ready`` pageable source is read ahead of the stream.
        """
        if not nbytes:
            return
        source = self.pointer_kind(src)
        target = self.pointer_kind(dst)
        if PAGEABLE not in (source, target) and not source == target == PINNED:
            self._async_copy(dst, src, nbytes, stream)
            return
        what = f"copying {nbytes} bytes from 0x{src:x} to 0x{dst:x}"
        self._refuse_host_work(stream, what)
        if DEVICE in (source, target):
            staged = not self._capturing(stream) and (
                self._stager.to_device(
                    dst, None, src, None, (nbytes,), 1, stream, source_ready
                )
                if source == PAGEABLE
                else self._stager.to_host(dst, None, src, None, (nbytes,), 1, stream)
            )
            if not staged:
                self._staged_copy(dst, src, nbytes, stream, source == PAGEABLE)
        else:
            self.launch_host_func(stream, lambda: _memmove(dst, src, nbytes))

    @staticmethod
    def _async_copy(dst: int, src: int, nbytes: int, stream: Stream) -> None:
        (err,) = _cu.driver.cuMemcpyAsync(dst, src, nbytes, stream.native)  # type: ignore
        if err:
            raise _cu.error(
                err, f"copying {nbytes} bytes from 0x{src:x} to 0x{dst:x} on {stream!r}"
            ) from None

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
        """Copy the elements of ``shape`` between two layouts in stream order.

        Notes
        -----
        Device-accessible memory on both sides: one ``cuMemcpy2DAsync`` per 2-D piece
        of :func:`~stflow._core.layout.pitched` (one for a tile of a matrix). Pageable
        memory against device memory: the host side is gathered into (or scattered
        from) pinned chunks by host threads (``_cuda_staging``; in a graph, a dense
        pinned staging buffer with NumPy in a host node); host memory on both
        sides: NumPy in a host callback. Only the elements' bytes of the
        destination are written.
        """
        if 0 in shape:
            return
        source = self.pointer_kind(src)
        target = self.pointer_kind(dst)
        if PAGEABLE not in (source, target) and not source == target == PINNED:
            self._pitched_copies(
                dst, dst_strides, src, src_strides, shape, itemsize, stream
            )
            return
        nbytes = math.prod(shape) * itemsize
        self._refuse_host_work(
            stream,
            f"copying {nbytes} bytes of a strided layout from 0x{src:x} to 0x{dst:x}",
        )
        if DEVICE not in (source, target):
            self.launch_host_func(
                stream,
                lambda: copy_elements(
                    dst, dst_strides, src, src_strides, shape, itemsize
                ),
            )
            return
        if not self._capturing(stream):
            args = (dst, dst_strides, src, src_strides, shape, itemsize, stream)
            if source == PAGEABLE:
                if self._stager.to_device(*args, source_ready):
                    return
            elif self._stager.to_host(*args):
                return
        staging = self._staging(nbytes)
        if source == PAGEABLE:
            self.launch_host_func(
                stream,
                lambda: copy_elements(staging, None, src, src_strides, shape, itemsize),
            )
            self._pitched_copies(dst, dst_strides, staging, None, shape, itemsize, stream)
        else:
            self._pitched_copies(staging, None, src, src_strides, shape, itemsize, stream)
            self.launch_host_func(
                stream,
                lambda: copy_elements(dst, dst_strides, staging, None, shape, itemsize),
            )
        self._defer(stream, lambda: self._release_staging(staging, nbytes))

    def _pitched_copies(
        self,
        dst: int,
        dst_strides: tuple[int, ...] | None,
        src: int,
        src_strides: tuple[int, ...] | None,
        shape: tuple[int, ...],
        itemsize: int,
        stream: Stream,
    ) -> None:
        """The 2-D copies of a layout-to-layout copy between device-accessible
        memory (unified addresses), enqueued on ``stream``."""
        pieces = pitched(shape, dst_strides, src_strides, itemsize)
        width, height = pieces.width, pieces.height
        dst_pitch, src_pitch = pieces.dst_pitch, pieces.src_pitch
        rows_apart = max(dst_pitch, src_pitch) > _MAX_PITCH
        for dst_offset, src_offset in pieces.offsets():
            d, s = dst + dst_offset, src + src_offset
            if height == 1 or rows_apart:  # contiguous runs: 1-D copies
                for row in range(height):
                    self._async_copy(
                        d + row * dst_pitch, s + row * src_pitch, width, stream
                    )
            else:
                self._copy_2d(d, dst_pitch, s, src_pitch, width, height, stream)

    def _copy_2d(
        self,
        dst: int,
        dst_pitch: int,
        src: int,
        src_pitch: int,
        width: int,
        height: int,
        stream: Stream,
    ) -> None:
        """One ``cuMemcpy2DAsync`` of ``height`` rows of ``width`` bytes."""
        unified = _cu.driver.CUmemorytype.CU_MEMORYTYPE_UNIFIED
        copy = _cu.driver.CUDA_MEMCPY2D()
        copy.srcMemoryType = unified
        copy.dstMemoryType = unified
        copy.srcPitch = src_pitch
        copy.dstPitch = dst_pitch
        copy.WidthInBytes = width
        copy.Height = height
        copy.srcDevice = src
        copy.dstDevice = dst
        (err,) = _cu.driver.cuMemcpy2DAsync(copy, stream.native)  # type: ignore
        if err:
            raise _cu.error(
                err,
                f"copying {height} rows of {width} bytes from 0x{src:x} (pitch "
                f"{src_pitch}) to 0x{dst:x} (pitch {dst_pitch}) on {stream!r}",
            ) from None

    def _staged_copy(
        self, dst: int, src: int, nbytes: int, stream: Stream, from_pageable: bool
    ) -> None:
        """Pageable <-> device memory through a pinned buffer, all in stream order."""
        staging = self._staging(nbytes)
        if from_pageable:
            self.launch_host_func(stream, lambda: _memmove(staging, src, nbytes))
            self._async_copy(dst, staging, nbytes, stream)
        else:
            self._async_copy(staging, src, nbytes, stream)
            self.launch_host_func(stream, lambda: _memmove(dst, staging, nbytes))
        self._defer(stream, lambda: self._release_staging(staging, nbytes))

    def _staging(self, nbytes: int) -> int:
        """A pinned buffer of at least ``nbytes`` bytes (recycled by size class)."""
        size = _size_class(nbytes)
        with self._deferred_lock:
            free = self._staging_free.get(size)
            if free:
                self._staging_cached -= size
                return free.pop()
        self._ensure_context()
        return int(
            _cu.check(
                _cu.driver.cuMemHostAlloc(size, _cu.driver.CU_MEMHOSTALLOC_PORTABLE),
                f"allocating a {size}-byte pinned staging buffer",
            )
        )

    def _release_staging(self, ptr: int, nbytes: int) -> None:
        size = _size_class(nbytes)
        with self._deferred_lock:
            if self._staging_cached + size <= _STAGING_CACHE:
                self._staging_free.setdefault(size, []).append(ptr)
                self._staging_cached += size
                return
        self._release_host(HOST, ptr)

    # -- fills -------------------------------------------------------------------------
    def fill(self, ptr: int, nbytes: int, pattern: bytes, stream: Stream) -> None:
        """Repeat ``pattern`` over ``nbytes`` at ``ptr``, ordered on ``stream``.

        Notes
        -----
        Any place, any pattern length; see the module docstring for the strategy.
        ``nbytes`` must be a whole number of patterns.
        """
        if not nbytes:
            return
        size = len(pattern)
        if not size or nbytes % size:
            raise ValueError(
                f"fill: {nbytes} bytes is not a whole number of {size}-byte patterns"
            )
        pattern = pattern[: _period(pattern)]
        kind = self.pointer_kind(ptr)
        if kind == PAGEABLE or (kind == PINNED and len(pattern) > _MAX_STRIDED_PERIOD):
            self._refuse_host_work(stream, f"filling {nbytes} bytes at 0x{ptr:x}")
            self.launch_host_func(stream, _host_filler(ptr, nbytes, pattern))
        elif len(pattern) > _MAX_STRIDED_PERIOD:
            self._fill_by_doubling(ptr, nbytes, pattern, stream)
        else:
            _memset(ptr, nbytes, pattern, stream)

    def _fill_by_doubling(
        self, ptr: int, nbytes: int, pattern: bytes, stream: Stream
    ) -> None:
        tile = pattern * max(1, min(nbytes, 1 << 16) // len(pattern))
        staging = self._staging(len(tile))
        ctypes.memmove(staging, tile, len(tile))  # our own buffer: no ordering needed
        self._async_copy(ptr, staging, len(tile), stream)
        self._defer(stream, lambda: self._release_staging(staging, len(tile)))
        done = len(tile)
        while done < nbytes:
            chunk = min(done, nbytes - done)
            self._async_copy(ptr + done, ptr, chunk, stream)
            done += chunk

    def _capturing(self, stream: Stream) -> bool:
        """True when ``stream`` captures into a CUDA graph."""
        return bool(self._captures) and stream.handle in self._captures

    def _refuse_host_work(self, stream: Stream, what: str) -> None:
        """Raise ``ScopeError`` if ``stream`` captures a loop body (no host nodes)."""
        capture = self._captures.get(stream.handle) if self._captures else None
        if capture is not None and capture.in_loop_body:
            raise ScopeError(
                f"{what} on {stream!r} runs on the host, in a host callback, and the "
                "body of a loop on the CUDA backend cannot hold host callbacks (a "
                "conditional graph node runs kernels, copies and fills only); keep "
                "host work out of the loop, or use device or page-locked memory "
                "(register the host array) so that copies run on the device"
            )

    # -- deferred releases -------------------------------------------------------------
    def _defer(self, stream: Stream, action: Callable[[], None] | None) -> None:
        """Run ``action`` once the work enqueued on ``stream`` so far has completed.

        On a stream capturing into a graph, ``action`` runs when the graph and its
        executables are released instead.
        """
        capture = self._captures.get(stream.handle) if self._captures else None
        if capture is not None:
            if action is not None:
                capture.resources.releases.append(action)
            return
        pool = stream.events  # type: ignore[attr-defined]
        try:
            handle = pool.pop()
        except IndexError:
            handle = self._new_event(stream.ordinal)
        (err,) = _cu.driver.cuEventRecord(handle, stream.native)  # type: ignore
        if err:
            pool.append(handle)
            raise _cu.error(err, f"cuEventRecord on {stream!r}") from None
        with self._deferred_lock:
            self._deferred.append((handle, pool, action))

    def _after_events(
        self, events: list[tuple[Any, list]], action: Callable[[], None]
    ) -> None:
        """Run ``action`` once all ``events`` (recorded ``(handle, pool)`` pairs)
        have completed; each handle then returns to its pool."""
        left = [len(events)]
        lock = threading.Lock()

        def one_done() -> None:
            with lock:
                left[0] -= 1
                last = not left[0]
            if last:
                action()

        with self._deferred_lock:
            self._deferred.extend((handle, pool, one_done) for handle, pool in events)

    def _reap(self) -> None:
        """Run the deferred releases whose events have completed."""
        if not self._deferred:
            return
        query = _cu.driver.cuEventQuery
        done = []
        with self._deferred_lock:
            pending = []
            for entry in self._deferred:
                (err,) = query(entry[0])
                if err == self._not_ready:
                    pending.append(entry)
                else:
                    entry[1].append(entry[0])
                    done.append(entry[2])
            self._deferred = pending
        for action in done:
            if action is not None:
                action()


def _memset(ptr: int, nbytes: int, pattern: bytes, stream: Stream) -> None:
    """Fill with a pattern of at most 16 bytes using the driver's memsets."""
    d = _cu.driver
    native = stream.native  # type: ignore[attr-defined]
    period = len(pattern)
    step = f"filling {nbytes} bytes at 0x{ptr:x} with a {period}-byte pattern"
    if period == 1:
        _cu.check(d.cuMemsetD8Async(ptr, pattern[0], nbytes, native), step)
    elif period == 2 and not ptr % 2:
        _cu.check(
            d.cuMemsetD16Async(
                ptr, int.from_bytes(pattern, "little"), nbytes // 2, native
            ),
            step,
        )
    elif period == 4 and not ptr % 4:
        _cu.check(
            d.cuMemsetD32Async(
                ptr, int.from_bytes(pattern, "little"), nbytes // 4, native
            ),
            step,
        )
    else:  # one strided 2D memset per column
        width = (
            4
            if not period % 4 and not ptr % 4
            else 2
            if not period % 2 and not ptr % 2
            else 1
        )
        memset = {
            1: d.cuMemsetD2D8Async,
            2: d.cuMemsetD2D16Async,
            4: d.cuMemsetD2D32Async,
        }[width]
        rows = nbytes // period
        for offset in range(0, period, width):
            value = int.from_bytes(pattern[offset : offset + width], "little")
            _cu.check(memset(ptr + offset, period, value, 1, rows, native), step)


def _host_filler(ptr: int, nbytes: int, pattern: bytes) -> Callable[[], None]:
    """A host callback writing ``pattern`` over ``nbytes`` at ``ptr``."""
    tile = np.frombuffer(pattern, dtype=np.uint8)

    def fill_on_host() -> None:
        target = memoryview((ctypes.c_uint8 * nbytes).from_address(ptr))
        np.frombuffer(target, dtype=np.uint8).reshape(-1, len(pattern))[:] = tile

    return fill_on_host


def _memmove(dst: int, src: int, nbytes: int) -> None:
    ctypes.memmove(dst, src, nbytes)


def _period(pattern: bytes) -> int:
    """The length of the shortest prefix whose repetition is ``pattern``."""
    size = len(pattern)
    for period in range(1, size):
        if not size % period and pattern[:period] * (size // period) == pattern:
            return period
    return size


def _size_class(nbytes: int) -> int:
    """Staging buffers come in powers of two from 4 KiB."""
    return max(4096, 1 << (nbytes - 1).bit_length())
