"""Data places (where an instance lives) and execution places (where a task runs).

Places are plain values built by factories (``data_place.device(0)``,
``exec_place.host()``), independent of any context. Direct construction raises
``TypeError`` naming the factories. A factory checks its device ordinal at once,
against the default backend (``STFLOW_BACKEND``; ``DeviceOrdinalError``, a
``PlaceError`` that is also the reference's ``RuntimeError``); a context checks
again, against its own backend, when it uses the place.

Grids (:class:`exec_place_grid`) arrange places in C-order dims; composite and
replicated data places (``data_place.composite`` / ``.replicated``) spread a data over
a grid — ``partition.py`` holds the mapper contract, ``gridwork.py`` what the
runtime does with them.

Locality-domain, green-context and context places are places of this module too
(labelled, and holding the ``StreamPartition`` their streams are created in); what
they need of the backend — domain counts, the device and partition of a context —
comes from ``locality.py`` below, the view of a green context (``green_ctx_view``)
from ``green_view.py`` below, and the splitting of a device into green contexts
(``green_context_helper``, ``green_places``) from ``green.py`` above, which builds
its places with the factories here.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from .._core.errors import NegativeIndexError, PlaceAllocationError, PlaceError
from ..backends._base import AFFINE, HOST, MANAGED
from .green_view import green_ctx_view
from .locality import (
    check_device_ordinal,
    check_domain,
    check_split,
    context_partition,
    default_backend,
    default_device_count,
    locality_domain_count,
)
from .numbering import (
    COMPOSITE,
    LAYOUT_DEVICE_ID,
    MAX_GRID_PLACES,
    REPLICATED,
    check_extents,
    from_handle,
    handle_of,
    next_handle,
    next_layout_number,
    place_name,
    product,
    register_handle,
)
from .partition import blocked
from .stream_partitions import StreamPartition

__all__ = [
    "ExecPlaceConvertible",
    "StreamResources",
    "data_place",
    "exec_place",
    "exec_place_grid",
    "locality_domain_places",
]


class StreamResources(abc.ABC):
    """What :meth:`exec_place.pick_stream` takes: pools that lend the streams of a
    place (``exec_place_resources``, in ``_engine/resources.py``, which places do not
    import)."""

    __slots__ = ()

    @abc.abstractmethod
    def _pick_stream(self, place: exec_place, for_computation: bool) -> Any:
        """The next stream of ``place``'s pool, as a ``CudaStream``: a computation
        stream, or with ``for_computation=False`` a transfer stream."""


@runtime_checkable
class ExecPlaceConvertible(Protocol):
    """An object of another library that names an execution place (the reference's
    conversion protocol, accepted where a list of places is)."""

    def _as_stf_exec_place(self) -> exec_place:
        """The execution place this object stands for."""


class _SavedDevices(threading.local):
    """The current devices that the open ``with place:`` blocks of one place
    replaced, innermost last (per thread)."""

    def __init__(self) -> None:
        self.stack: list[int] = []


class data_place:
    """Where an instance of a logical data lives.

    Build one with a factory: :meth:`host`, :meth:`device`, :meth:`managed`,
    :meth:`affine` or :meth:`current_device`.
    """

    __slots__ = ("_device", "__weakref__")
    _device: int

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "data_place cannot be constructed directly; use "
            "data_place.host(), .device(n), .managed(), .affine() or "
            ".current_device()"
        )

    @classmethod
    def _make(cls, device: int) -> data_place:
        place = cls.__new__(cls)
        place._device = device
        return place

    @staticmethod
    def host() -> data_place:
        """Page-locked host memory."""
        return data_place._make(HOST)

    @staticmethod
    def device(dev_id: int = 0) -> data_place:
        """The memory of device ``dev_id``."""
        return data_place._make(
            check_device_ordinal(dev_id, "data_place.device", default_device_count())
        )

    @staticmethod
    def managed() -> data_place:
        """CUDA managed memory, accessible from the host and every device."""
        return data_place._make(MANAGED)

    @staticmethod
    def affine() -> data_place:
        """The memory of whatever execution place runs the task (the default)."""
        return data_place._make(AFFINE)

    @staticmethod
    def composite(
        grid: exec_place, mapper: Any, *, data_rank: int | None = None
    ) -> data_place:
        """Data spread over the members of ``grid``: ``mapper`` says which member's
        memory holds each part (the partition mapper contract, ``partition.py``;
        ``stflow.partitions`` has ready-made ones).

        Notes
        -----
        A task sees the whole data as one array; each member touches its part
        locally. The mapper runs during ``task.start()`` when an instance is
        allocated; its exceptions, and coordinates outside the grid (``ValueError``),
        are raised from there. ``data_rank`` selects the C-order form of the
        contract (element coordinates of that rank, C-order grid dims and result),
        which later reference releases use.
        """
        if not isinstance(grid, exec_place):
            raise TypeError(
                f"data_place.composite expects an exec_place grid, got "
                f"{type(grid).__name__}"
            )
        if not callable(mapper):
            raise TypeError(
                f"data_place.composite: the mapper must be callable "
                f"(data_coords, data_dims, grid_dims) -> grid coordinate, "
                f"got {type(mapper).__name__}"
            )
        if data_rank is not None and (
            isinstance(data_rank, bool)
            or not isinstance(data_rank, int)
            or not 1 <= data_rank <= 4
        ):
            raise ValueError(
                f"data_place.composite: data_rank must be an int from 1 "
                f"to 4, got {data_rank!r}"
            )
        place = _LayoutPlace._layout(COMPOSITE, grid, mapper)
        place._data_rank = data_rank
        return place

    @staticmethod
    def replicated(grid: exec_place | None = None) -> data_place:
        """A read-only copy of the data in the memory of every member of ``grid``;
        ``None`` binds to the grid of the task that uses it (``affine()`` for a task
        on a single place)."""
        if grid is not None and not isinstance(grid, exec_place):
            raise TypeError(
                f"data_place.replicated expects an exec_place grid or "
                f"None, got {type(grid).__name__}"
            )
        return _LayoutPlace._layout(REPLICATED, grid, None)

    @staticmethod
    def current_device() -> data_place:
        """The current device's memory, resolved now."""
        return data_place._make(default_backend().current_device())

    @staticmethod
    def locality_domain(dev_id: int, domain_id: int) -> data_place:
        """Memory local to locality domain ``domain_id`` of device ``dev_id`` (plain
        device memory where the driver reports no domains; ``locality.py``)."""
        device, domain = check_domain(dev_id, domain_id, "data_place.locality_domain")
        return _domain_memory(device, domain)

    @staticmethod
    def green_ctx(view: Any) -> data_place:
        """The memory of the green context ``view`` (a ``green_ctx_view``): its
        device's memory."""
        if not isinstance(view, green_ctx_view):
            raise TypeError(
                f"data_place.green_ctx expects a green_ctx_view, got "
                f"{type(view).__name__}"
            )
        return _labelled_data_place._labelled(
            view.device_id, f"green_ctx(dev={view.device_id}, ctx={view.index})"
        )

    @staticmethod
    def from_handle(h: int) -> data_place:
        """The data place whose ``_handle_int`` is ``h``.

        Raises
        ------
        TypeError
            ``h`` is not an ``int``.
        ValueError
            ``h == 0`` (a null handle).
        PlaceError
            ``h`` names no live data place.
        """
        return from_handle(h, data_place)

    @property
    def _handle_int(self) -> int:
        """An opaque ``int`` id of this place, accepted by :meth:`from_handle`."""
        return handle_of(self)

    @property
    def kind(self) -> str:
        device = self._device
        if device >= 0:
            return f"dev{device}"
        return {HOST: "host", MANAGED: "managed", AFFINE: "affine"}[device]

    @property
    def device_id(self) -> int:
        return self._device

    @property
    def allocation_is_stream_ordered(self) -> bool:
        return self._device >= 0

    def allocate(self, nbytes: int, stream: Any = None) -> int:
        """Allocate ``nbytes`` of raw memory here and return its address.

        Notes
        -----
        Stream-ordered on ``stream`` for device places; ``stream`` is ignored for host
        and managed memory. Free with :meth:`deallocate`.
        """
        from ..backends import place_allocator

        return place_allocator().allocate(self, nbytes, stream)

    def deallocate(self, ptr: int, nbytes: int, stream: Any = None) -> None:
        """Free memory returned by :meth:`allocate`; ``ptr == 0`` does nothing."""
        from ..backends import place_allocator

        place_allocator().deallocate(self, ptr, nbytes, stream)

    def __repr__(self) -> str:
        return place_name(self._device)


class exec_place:
    """Where a task runs: the host or a device.

    Build one with :meth:`host`, :meth:`device` or :meth:`current_device`.
    """

    __slots__ = ("_device", "_affine", "_handle", "_saved", "_stream_key", "__weakref__")
    _device: int
    _affine: data_place | None
    _handle: int
    _saved: _SavedDevices | None
    _stream_key: int
    """Which stream pool serves the place: its device number, or the key of its
    green context or foreign CUDA context (``_stream_partitions.StreamPartition``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "exec_place cannot be constructed directly; use "
            "exec_place.host(), .device(n) or .current_device()"
        )

    @classmethod
    def _make(cls, device: int) -> exec_place:
        place = cls.__new__(cls)
        place._device = device
        place._affine = None
        place._handle = next_handle()
        place._saved = None
        place._stream_key = device
        return place

    @staticmethod
    def host() -> exec_place:
        """The host. A host task's arguments are host memory."""
        return exec_place._make(HOST)

    @staticmethod
    def device(dev_id: int = 0) -> exec_place:
        """Device ``dev_id``."""
        return exec_place._make(
            check_device_ordinal(dev_id, "exec_place.device", default_device_count())
        )

    @staticmethod
    def current_device() -> exec_place:
        """The current device, resolved now."""
        return exec_place._make(default_backend().current_device())

    @staticmethod
    def locality_domain(
        dev_id: int, domain_id: int, sm_split: str = "backfill"
    ) -> exec_place:
        """The SMs of locality domain ``domain_id`` of device ``dev_id``; ``sm_split``
        is ``"backfill"``, ``"aligned"`` or ``"fine"`` (``locality.py``)."""
        split = check_split(sm_split)
        device, domain = check_domain(dev_id, domain_id, "exec_place.locality_domain")
        place = _partition_place._new(
            device,
            None,
            None,
            f"locality_domain(dev={device},id={domain}), sm_split={split!r}",
        )
        place._affine = _domain_memory(device, domain)
        return place

    @staticmethod
    def green_ctx(view: Any, use_green_ctx_data_place: bool = False) -> exec_place:
        """The SM partition of the green context ``view`` (a ``green_ctx_view``); with
        ``use_green_ctx_data_place`` its affine data place is
        ``data_place.green_ctx(view)`` (``green.py``)."""
        if not isinstance(view, green_ctx_view):
            raise TypeError(
                f"exec_place.green_ctx expects a green_ctx_view, got "
                f"{type(view).__name__}"
            )
        partition = view._partition
        place = _partition_place._new(partition.device, partition, view, partition.label)
        if use_green_ctx_data_place:  # the view keeps the helper's contexts alive
            place._affine = data_place.green_ctx(view)
        return place

    @staticmethod
    def from_context(ctx: Any, dev_id: int = -1) -> exec_place:
        """A place bound to an existing CUDA context: an ``int`` ``CUcontext`` or an
        object with ``.handle`` (a ``cuda.core`` Context, green ones included), kept
        alive and returned by :attr:`backing_context`. ``dev_id=-1`` derives the
        device (``locality.context_partition``)."""
        device, partition = context_partition(ctx, dev_id)
        if partition is None:  # the device's own context: a device place
            return _partition_place._new(device, None, ctx, f"device={device}")
        return _partition_place._new(device, partition, ctx, partition.label)

    @staticmethod
    def from_handle(h: int) -> exec_place:
        """The execution place whose ``_handle_int`` is ``h`` (``0`` → ``ValueError``,
        unknown → ``PlaceError``)."""
        return from_handle(h, exec_place)

    def pick_stream(self, resources: Any, for_computation: bool = True) -> Any:
        """A stream of this place from the pools of ``resources`` (an
        ``exec_place_resources``): a computation stream, or with
        ``for_computation=False`` a transfer stream.

        Returns
        -------
        CudaStream
            Valid until ``resources`` is collected (or its context finalized).

        Notes
        -----
        No ``with place:`` block is needed. Separate resource objects give separate
        streams (``stflow._engine.resources``).
        """
        if not isinstance(resources, StreamResources):
            raise TypeError(
                f"pick_stream expects an exec_place_resources (e.g. "
                f"exec_place_resources() or ctx.place_resources), got "
                f"{type(resources).__name__}"
            )
        return resources._pick_stream(self, for_computation)

    @property
    def kind(self) -> str:
        return "host" if self._device == HOST else "device"

    @property
    def device_id(self) -> int:
        """The device ordinal, ``-1`` for the host (stflow-only convenience)."""
        return self._device

    @property
    def backing_context(self) -> Any:
        return None

    @property
    def dims(self) -> tuple[int, ...]:
        return (1,)

    @property
    def size(self) -> int:
        return 1

    @property
    def _handle_int(self) -> int:
        register_handle(self._handle, self)  # so that from_handle finds it
        return self._handle

    @property
    def affine_data_place(self) -> data_place:
        """A new ``data_place`` for the memory affine to this place."""
        if self._affine is not None:
            return self._affine
        return data_place._make(self._device)

    def _affine_device(self) -> int:
        """The device number of the affine memory (``HOST`` for the host)."""
        if self._affine is not None:
            return self._affine._device
        return self._device

    def set_affine_data_place(self, dplace: data_place) -> None:
        """Use ``dplace`` for dependencies with ``affine()`` places on this place."""
        if not isinstance(dplace, data_place):
            raise TypeError(
                f"set_affine_data_place expects a data_place, got {type(dplace).__name__}"
            )
        if dplace._device == AFFINE:
            raise PlaceError(
                "the affine data place of an exec_place cannot itself be "
                "data_place.affine(); give a concrete place"
            )
        self._affine = dplace

    def get_place(self, idx: int) -> exec_place:
        """Sub-place ``idx``; a scalar place has only ``0``."""
        if isinstance(idx, bool) or not isinstance(idx, int):
            raise TypeError(f"get_place expects an int, got {type(idx).__name__}")
        if idx < 0:
            raise NegativeIndexError(
                f"get_place: negative index {idx}; a scalar exec_place has only index 0"
            )
        if idx != 0:
            raise IndexError(
                f"index {idx} out of range for a scalar exec_place (only 0 is valid)"
            )
        return self

    __getitem__ = get_place

    def _members(self) -> tuple[exec_place, ...]:
        """The places of the grid in C order (a scalar place: itself)."""
        return (self,)

    def reshape(self, grid_dims: Any) -> exec_place_grid:
        """The same places in the same linear order, arranged as C-order
        ``grid_dims`` (whose product must be :attr:`size`)."""
        dims = check_extents(grid_dims, "reshape")
        members = self._members()
        if product(dims) != len(members):
            raise ValueError(
                f"cannot reshape a grid of {len(members)} places into "
                f"grid dims {dims}, which hold {product(dims)} places; "
                f"give dims whose product is {len(members)}"
            )
        return exec_place_grid._grid(members, dims, self._affine)

    def collapse_axes(self, first_axis: int, last_axis: int) -> exec_place_grid:
        """Merge axes ``first_axis..last_axis`` (inclusive) into one whose extent is
        their product: dims ``(2, 3, 4)`` with ``(0, 1)`` give ``(6, 4)``."""
        dims = self.dims
        for axis in (first_axis, last_axis):
            if isinstance(axis, bool) or not isinstance(axis, int):
                raise TypeError(
                    f"collapse_axes expects int axes, got {type(axis).__name__}"
                )
        if not 0 <= first_axis <= last_axis < len(dims):
            raise ValueError(
                f"collapse_axes({first_axis}, {last_axis}): need "
                f"0 <= first <= last < {len(dims)} for dims {dims}"
            )
        merged = product(dims[first_axis : last_axis + 1])
        new_dims = dims[:first_axis] + (merged,) + dims[last_axis + 1 :]
        return exec_place_grid._grid(self._members(), new_dims, self._affine)

    def __enter__(self) -> exec_place:
        backend = default_backend()
        saved = self._saved
        if saved is None:
            saved = self._saved = _SavedDevices()
        saved.stack.append(backend.current_device())
        if self._device >= 0:
            backend.set_current_device(self._device)
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._saved is not None
        default_backend().set_current_device(self._saved.stack.pop())

    def __repr__(self) -> str:
        if self._device == HOST:
            return "exec_place(host)"
        return f"exec_place(device={self._device})"


class exec_place_grid(exec_place):
    """Several execution places arranged in a C-order grid of rank 1 to 4.

    Build one with :meth:`from_devices`, :meth:`create`, :meth:`machine`,
    :meth:`locality_domains`, or ``place.reshape(dims)``. A task on a grid gets one
    stream per member (``task.get_stream_at_index(i)``); its dependencies without a
    data place use the grid's affine data place (a composite place from ``mapper=``
    or :meth:`machine`, or one given to ``set_affine_data_place``).
    """

    __slots__ = ("_grid_members", "_grid_dims")
    _grid_members: tuple[exec_place, ...]
    _grid_dims: tuple[int, ...]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "exec_place_grid cannot be constructed directly; use "
            "exec_place_grid.from_devices(ids), .create(places, grid_dims, "
            "mapper), .machine() or place.reshape(dims)"
        )

    @classmethod
    def _grid(
        cls,
        members: Sequence[exec_place],
        dims: tuple[int, ...],
        affine: data_place | None = None,
    ) -> exec_place_grid:
        flat: list[exec_place] = []
        for member in members:
            flat.extend(member._members())  # a grid of grids is flattened
        grid = cls._make(flat[0]._device)
        assert isinstance(grid, exec_place_grid)
        grid._grid_members = tuple(flat)
        grid._grid_dims = dims
        grid._affine = affine
        grid._stream_key = flat[0]._stream_key  # member 0's streams (a partition's)
        return grid

    @staticmethod
    def from_devices(device_ids: Sequence[int]) -> exec_place:
        """A 1-D grid of ``exec_place.device(i)`` for each ``i`` (repeats allowed:
        ``[0, 0]`` is two places on device 0); one device gives the scalar place."""
        try:
            ids = [device_ids[i] for i in range(len(device_ids))]
        except TypeError:
            raise TypeError(
                f"exec_place_grid.from_devices expects a sequence of device "
                f"ordinals, got {type(device_ids).__name__}"
            ) from None
        if not ids:
            raise ValueError("exec_place_grid.from_devices needs at least one device")
        if len(ids) > MAX_GRID_PLACES:
            raise ValueError(
                f"exec_place_grid.from_devices: {len(ids)} places, at most "
                f"{MAX_GRID_PLACES}"
            )
        places = [exec_place.device(i) for i in ids]
        if len(places) == 1:
            return places[0]
        return exec_place_grid._grid(places, (len(places),))

    @staticmethod
    def create(
        places: Sequence[Any],
        grid_dims: Any = None,
        mapper: Any = None,
        *,
        data_rank: int | None = None,
    ) -> exec_place_grid:
        """A grid of ``places`` (C order) with C-order ``grid_dims`` (``None``: 1-D).

        With ``mapper``, ``data_place.composite(grid, mapper)`` becomes the grid's
        affine data place.
        """
        try:
            given = list(places)
        except TypeError:
            raise TypeError(
                f"exec_place_grid.create expects a sequence of exec_place, "
                f"got {type(places).__name__}"
            ) from None
        members: list[exec_place] = []
        for place in given:
            if not isinstance(place, exec_place) and isinstance(
                place, ExecPlaceConvertible
            ):
                place = place._as_stf_exec_place()
            if not isinstance(place, exec_place):
                raise TypeError(
                    f"exec_place_grid.create: places must be exec_place "
                    f"objects, got {type(place).__name__}"
                )
            members.extend(place._members())
        if not members:
            raise ValueError("exec_place_grid.create needs at least one place")
        if len(members) > MAX_GRID_PLACES:
            raise ValueError(
                f"exec_place_grid.create: {len(members)} places, at most "
                f"{MAX_GRID_PLACES}"
            )
        dims = (
            (len(members),)
            if grid_dims is None
            else check_extents(grid_dims, "exec_place_grid.create")
        )
        if product(dims) != len(members):
            raise ValueError(
                f"exec_place_grid.create: grid dims {dims} hold "
                f"{product(dims)} places, {len(members)} were given"
            )
        grid = exec_place_grid._grid(members, dims)
        if mapper is not None:
            grid._affine = data_place.composite(grid, mapper, data_rank=data_rank)
        return grid

    @staticmethod
    def machine(granularity: str = "device") -> exec_place:
        """One place per device (``"device"``) or per locality domain of every device
        (``"locality_domain"``, device-major). With several places, the affine data
        place is blocked along the data's slowest axis."""
        if granularity not in ("device", "locality_domain"):
            raise ValueError(
                f"exec_place_grid.machine: granularity must be 'device' or "
                f"'locality_domain', got {granularity!r}"
            )
        count = default_backend().device_count
        if count < 1:
            raise PlaceError("exec_place_grid.machine: this machine has no device")
        if granularity == "device":
            places: list[exec_place] = [exec_place.device(i) for i in range(count)]
        else:
            places = []
            for device in range(count):
                places.extend(locality_domain_places(device, "backfill"))
        if len(places) == 1:
            return places[0]
        grid = exec_place_grid._grid(places, (len(places),))
        grid._affine = data_place.composite(grid, blocked())
        return grid

    @staticmethod
    def locality_domains(dev_id: int = 0, sm_split: str = "backfill") -> exec_place_grid:
        """A 1-D grid of device ``dev_id``'s locality domains (one whole-device place
        where the driver reports none)."""
        places = locality_domain_places(dev_id, sm_split)
        return exec_place_grid._grid(places, (len(places),))

    @property
    def grid_rank(self) -> int:
        """The number of axes of the grid."""
        return len(self._grid_dims)

    @property
    def dims(self) -> tuple[int, ...]:
        return self._grid_dims

    @property
    def size(self) -> int:
        return len(self._grid_members)

    def _members(self) -> tuple[exec_place, ...]:
        return self._grid_members

    def get_place(self, idx: int) -> exec_place:
        """Member ``idx`` in C order (``0 <= idx < size``)."""
        if isinstance(idx, bool) or not isinstance(idx, int):
            raise TypeError(f"get_place expects an int, got {type(idx).__name__}")
        members = self._grid_members
        if idx < 0:
            raise NegativeIndexError(
                f"get_place: negative index {idx}; the grid's "
                f"members are 0..{len(members) - 1}"
            )
        if not 0 <= idx < len(members):
            raise IndexError(
                f"index {idx} out of range for a grid of {len(members)} places"
            )
        return members[idx]

    __getitem__ = get_place

    def __repr__(self) -> str:
        members = list(self._grid_members)
        return f"exec_place_grid(dims={self._grid_dims}, places={members})"


class _LayoutPlace(data_place):
    """A composite or replicated data place (see :meth:`data_place.composite`,
    :meth:`data_place.replicated`). Its place number (``_device``) is unique and at
    or below :data:`LAYOUT_IDS`."""

    __slots__ = ("_layout_kind", "_grid", "_mapper", "_data_rank")
    _layout_kind: str
    _grid: exec_place | None
    _mapper: Any
    _data_rank: int | None

    @classmethod
    def _layout(cls, kind: str, grid: exec_place | None, mapper: Any) -> _LayoutPlace:
        place = cls.__new__(cls)
        place._layout_kind = kind
        place._grid = grid
        place._mapper = mapper
        place._data_rank = None
        place._device = next_layout_number(place)
        return place

    @property
    def kind(self) -> str:
        if self._layout_kind == REPLICATED and self._grid is None:
            return "replicated(deferred)"
        return self._layout_kind

    @property
    def device_id(self) -> int:
        return LAYOUT_DEVICE_ID

    @property
    def allocation_is_stream_ordered(self) -> bool:
        return False

    @property
    def grid(self) -> exec_place | None:
        """The grid the data is spread over (``None``: a deferred replicated place)."""
        return self._grid

    @property
    def mapper(self) -> Any:
        """The partition mapper of a composite place (``None`` for replicated)."""
        return self._mapper

    def allocate(self, nbytes: int, stream: Any = None) -> int:
        raise PlaceAllocationError(
            f"data_place.allocate failed: {self!r} cannot allocate raw memory: a "
            f"{self._layout_kind} place holds logical data only; allocate on a device "
            "place"
        )

    def deallocate(self, ptr: int, nbytes: int, stream: Any = None) -> None:
        if ptr:
            raise PlaceError(f"{self!r} never allocated memory at 0x{ptr:x}")

    def __repr__(self) -> str:
        return f"data_place({self.kind!r})"


def locality_domain_places(
    dev_id: int = 0, sm_split: str = "backfill"
) -> list[exec_place]:
    """One execution place per locality domain of device ``dev_id``, in domain order
    (what ``exec_place_grid.locality_domains`` arranges in a rank-1 grid)."""
    split = check_split(sm_split)
    device = check_device_ordinal(dev_id, "exec_place_grid.locality_domains")
    return [
        exec_place.locality_domain(device, domain, split)
        for domain in range(locality_domain_count(device))
    ]


class _partition_place(exec_place):
    """An execution place with a label: a locality domain's (the device's streams),
    or one whose streams live in a green context or a foreign context
    (``_partition``); ``_backing`` is what keeps that context alive."""

    __slots__ = ("_partition", "_backing", "_label")
    _partition: StreamPartition | None
    _backing: Any
    _label: str

    @classmethod
    def _new(
        cls, device: int, partition: StreamPartition | None, backing: Any, label: str
    ) -> _partition_place:
        place = cls._make(device)
        assert isinstance(place, _partition_place)
        place._partition = partition
        if partition is not None:
            place._stream_key = partition.key
        place._backing = backing
        place._label = label
        return place

    @property
    def backing_context(self) -> Any:
        return self._backing

    def __enter__(self) -> exec_place:
        super().__enter__()
        if self._partition is not None:  # CUDA: make the partition's context current
            default_backend().enter_partition(self._partition.native)
        return self

    def __repr__(self) -> str:
        return f"exec_place({self._label})"


class _labelled_data_place(data_place):
    """A device's memory under another name: a locality domain's or a green
    context's."""

    __slots__ = ("_label",)
    _label: str

    @classmethod
    def _labelled(cls, device: int, label: str) -> _labelled_data_place:
        place = cls._make(device)
        assert isinstance(place, _labelled_data_place)
        place._label = label
        return place

    @property
    def kind(self) -> str:
        return self._label

    def __repr__(self) -> str:
        return f"data_place({self._label!r})"


def _domain_memory(device: int, domain: int) -> data_place:
    """``data_place.locality_domain(device, domain)`` of checked ordinals."""
    return _labelled_data_place._labelled(
        device, f"locality_domain(dev={device},id={domain})"
    )
