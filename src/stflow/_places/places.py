"""Data places (where an instance lives) and execution places (where a task runs).

Places are plain values built by factories (``data_place.device(0)``,
``exec_place.host()``), independent of any context. Direct construction raises
``TypeError`` naming the factories. A factory checks its device ordinal at once,
against the default backend (``STFLOW_BACKEND``; ``DeviceOrdinalError``, a
``PlaceError`` that is also the reference's ``RuntimeError``, I-8); a context checks
again, against its own backend, when it uses the place.

Grids (:class:`exec_place_grid`) arrange places in C-order dims; composite and
replicated data places (``data_place.composite`` / ``.replicated``) spread a data over
a grid — ``_partition.py`` holds the mapper contract, ``_gridwork.py`` what the
runtime does with them.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any, Sequence

from .. import _config
from .._errors import (DeviceOrdinalError, NegativeIndexError, PlaceAllocationError,
                      PlaceError)
from ..backends._base import AFFINE, HOST, MANAGED

__all__ = ["data_place", "exec_place", "exec_place_grid", "AFFINE", "LAYOUT_IDS",
           "check_device_ordinal", "check_extents", "layout_place", "place_name"]

_handles = itertools.count(1)

COMPOSITE = "composite"
REPLICATED = "replicated"
LAYOUT_DEVICE_ID = -5
"""``device_id`` of composite and replicated places (the reference's sentinel)."""
LAYOUT_IDS = -64
"""Composite and replicated places get place numbers at or below this one, one per
place object, so the runtime tells them apart like device ordinals
(:func:`layout_place` finds the place again)."""
MAX_GRID_PLACES = 64

_layout_numbers = itertools.count(-LAYOUT_IDS)
_layouts: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def layout_place(number: int) -> Any:
    """The composite or replicated place of place number ``number``
    (``<= LAYOUT_IDS``), or ``None`` once it is gone."""
    return _layouts.get(number)


def check_extents(dims: Any, what: str) -> tuple[int, ...]:
    """Validate C-order extents (1 to 4 positive ``int``; an ``int`` is a 1-tuple).

    Raises
    ------
    TypeError
        An element, or ``dims``, that is not a Python ``int`` (``bool`` refused).
    ValueError
        A length outside 1..4, or an element ``<= 0``.
    """
    if isinstance(dims, int) and not isinstance(dims, bool):
        dims = (dims,)
    if not isinstance(dims, (tuple, list)):
        raise TypeError(f"{what}: extents must be an int or a tuple of ints, got "
                        f"{type(dims).__name__}")
    for extent in dims:
        if isinstance(extent, bool) or not isinstance(extent, int):
            raise TypeError(f"{what}: extents must be Python ints, got "
                            f"{type(extent).__name__} in {tuple(dims)!r}")
    if not 1 <= len(dims) <= 4:
        raise ValueError(f"{what}: a grid has 1 to 4 axes, got {len(dims)} "
                         f"({tuple(dims)!r})")
    if any(extent <= 0 for extent in dims):
        raise ValueError(f"{what}: extents must be positive, got {tuple(dims)!r}")
    return tuple(int(extent) for extent in dims)


def _default_backend() -> Any:
    """The configured default backend (``STFLOW_BACKEND``), for the factories that
    resolve the current device now."""
    from ..backends import default_backend
    return default_backend(notify=False)


_known_count: tuple[Any, int] | None = None


def default_device_count() -> int:
    """The number of devices of the default backend (cached per configuration)."""
    global _known_count
    settings = _config.config()
    known = _known_count
    if known is not None and known[0] is settings:
        return known[1]
    count = _default_backend().device_count
    _known_count = (settings, count)
    return count


def check_device_ordinal(dev_id: Any, what: str, device_count: int | None = None) -> int:
    """Validate a device ordinal and return it as an ``int``.

    Without ``device_count`` only its type and sign are checked (a context checks
    the rest when it uses the place, against its own backend).

    Raises
    ------
    TypeError
        ``dev_id`` is not an ``int``.
    PlaceError
        ``dev_id`` is negative, or not below ``device_count``.
    """
    if isinstance(dev_id, bool) or not isinstance(dev_id, int):
        raise TypeError(f"{what}: the device ordinal must be an int, got "
                        f"{type(dev_id).__name__}")
    dev_id = int(dev_id)
    if dev_id < 0:
        raise DeviceOrdinalError(f"{what}: invalid device id {dev_id}: device ordinals "
                                 "are 0 or more")
    if device_count is not None and dev_id >= device_count:
        raise DeviceOrdinalError(
            f"{what}: invalid device id {dev_id}: device {dev_id} does not exist; valid "
            f"ordinals are 0..{device_count - 1} ({device_count} device(s))")
    return dev_id


def place_name(device: int) -> str:
    """How a data place of device number ``device`` prints (``data_place('dev0')``)."""
    if device >= 0:
        return f"data_place('dev{device}')"
    kind = {HOST: "host", MANAGED: "managed", AFFINE: "affine"}.get(device, str(device))
    return f"data_place({kind!r})"


_registered: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
"""Places whose ``_handle_int`` was asked for, by handle (``from_handle``)."""
_data_handles: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def _handle_of(place: data_place) -> int:
    """The handle of a data place (given on first request, then stable)."""
    handle = _data_handles.get(place)
    if handle is None:
        handle = _data_handles[place] = next(_handles)
        _registered[handle] = place
    return handle


def _from_handle(h: Any, cls: type) -> Any:
    """The live place of class ``cls`` whose ``_handle_int`` is ``h``."""
    what = f"{cls.__name__}.from_handle"
    if isinstance(h, bool) or not isinstance(h, int):
        raise TypeError(f"{what} expects an int handle, got {type(h).__name__}")
    if h == 0:
        raise ValueError(f"{what}: the handle is NULL (0); pass place._handle_int of a "
                         "live place")
    place = _registered.get(int(h))
    if place is None or not isinstance(place, cls):
        raise PlaceError(f"{what}: {h} is not the handle of a live {cls.__name__}; "
                         f"handles come from {cls.__name__}._handle_int and name "
                         "places of this process while they are alive")
    return place


class data_place:
    """Where an instance of a logical data lives.

    Build one with a factory: :meth:`host`, :meth:`device`, :meth:`managed`,
    :meth:`affine` or :meth:`current_device`.
    """

    __slots__ = ("_device", "__weakref__")
    _device: int

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("data_place cannot be constructed directly; use "
                        "data_place.host(), .device(n), .managed(), .affine() or "
                        ".current_device()")

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
        return data_place._make(check_device_ordinal(dev_id, "data_place.device",
                                                     default_device_count()))

    @staticmethod
    def managed() -> data_place:
        """CUDA managed memory, accessible from the host and every device."""
        return data_place._make(MANAGED)

    @staticmethod
    def affine() -> data_place:
        """The memory of whatever execution place runs the task (the default)."""
        return data_place._make(AFFINE)

    @staticmethod
    def composite(grid: exec_place, mapper: Any, *,
                  data_rank: int | None = None) -> data_place:
        """Data spread over the members of ``grid``: ``mapper`` says which member's
        memory holds each part (the partition mapper contract, ``stflow._partition``;
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
            raise TypeError(f"data_place.composite expects an exec_place grid, got "
                            f"{type(grid).__name__}")
        if not callable(mapper):
            raise TypeError(f"data_place.composite: the mapper must be callable "
                            f"(data_coords, data_dims, grid_dims) -> grid coordinate, "
                            f"got {type(mapper).__name__}")
        if data_rank is not None and (isinstance(data_rank, bool) or
                                      not isinstance(data_rank, int)
                                      or not 1 <= data_rank <= 4):
            raise ValueError(f"data_place.composite: data_rank must be an int from 1 "
                             f"to 4, got {data_rank!r}")
        place = _LayoutPlace._layout(COMPOSITE, grid, mapper)
        place._data_rank = data_rank
        return place

    @staticmethod
    def replicated(grid: exec_place | None = None) -> data_place:
        """A read-only copy of the data in the memory of every member of ``grid``;
        ``None`` binds to the grid of the task that uses it (``affine()`` for a task
        on a single place)."""
        if grid is not None and not isinstance(grid, exec_place):
            raise TypeError(f"data_place.replicated expects an exec_place grid or "
                            f"None, got {type(grid).__name__}")
        return _LayoutPlace._layout(REPLICATED, grid, None)

    @staticmethod
    def current_device() -> data_place:
        """The current device's memory, resolved now."""
        return data_place._make(_default_backend().current_device())

    @staticmethod
    def locality_domain(dev_id: int, domain_id: int) -> data_place:
        """Memory local to locality domain ``domain_id`` of device ``dev_id`` (plain
        device memory where the driver reports no domains; ``stflow._locality``)."""
        from .locality import domain_data_place
        return domain_data_place(dev_id, domain_id)

    @staticmethod
    def green_ctx(view: Any) -> data_place:
        """The memory of the green context ``view`` (a ``green_ctx_view``): its
        device's memory."""
        from .green import green_data_place
        return green_data_place(view)

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
        return _from_handle(h, data_place)

    @property
    def _handle_int(self) -> int:
        """An opaque ``int`` id of this place, accepted by :meth:`from_handle`."""
        return _handle_of(self)

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
    _saved: threading.local | None
    _stream_key: int
    """Which stream pool serves the place: its device number, or the key of its
    green context or foreign CUDA context (``_stream_partitions.StreamPartition``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("exec_place cannot be constructed directly; use "
                        "exec_place.host(), .device(n) or .current_device()")

    @classmethod
    def _make(cls, device: int) -> exec_place:
        place = cls.__new__(cls)
        place._device = device
        place._affine = None
        place._handle = next(_handles)
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
        return exec_place._make(check_device_ordinal(dev_id, "exec_place.device",
                                                     default_device_count()))

    @staticmethod
    def current_device() -> exec_place:
        """The current device, resolved now."""
        return exec_place._make(_default_backend().current_device())

    @staticmethod
    def locality_domain(dev_id: int, domain_id: int, sm_split: str = "backfill"
                        ) -> exec_place:
        """The SMs of locality domain ``domain_id`` of device ``dev_id``; ``sm_split``
        is ``"backfill"``, ``"aligned"`` or ``"fine"`` (``stflow._locality``)."""
        from .locality import domain_exec_place
        return domain_exec_place(dev_id, domain_id, sm_split)

    @staticmethod
    def green_ctx(view: Any, use_green_ctx_data_place: bool = False) -> exec_place:
        """The SM partition of the green context ``view`` (a ``green_ctx_view``); with
        ``use_green_ctx_data_place`` its affine data place is
        ``data_place.green_ctx(view)`` (``stflow._green``)."""
        from .green import green_exec_place
        return green_exec_place(view, use_green_ctx_data_place)

    @staticmethod
    def from_context(ctx: Any, dev_id: int = -1) -> exec_place:
        """A place bound to an existing CUDA context: an ``int`` ``CUcontext`` or an
        object with ``.handle`` (a ``cuda.core`` Context, green ones included), kept
        alive and returned by :attr:`backing_context`. ``dev_id=-1`` derives the
        device (``stflow._green``)."""
        from .green import place_from_context
        return place_from_context(ctx, dev_id)

    @staticmethod
    def from_handle(h: int) -> exec_place:
        """The execution place whose ``_handle_int`` is ``h`` (``0`` → ``ValueError``,
        unknown → ``PlaceError``)."""
        return _from_handle(h, exec_place)

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
        streams (``stflow._resources``).
        """
        pick = getattr(resources, "_pick_stream", None)
        if pick is None:
            raise TypeError(f"pick_stream expects an exec_place_resources (e.g. "
                            f"exec_place_resources() or ctx.place_resources), got "
                            f"{type(resources).__name__}")
        return pick(self, for_computation)

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
        _registered[self._handle] = self          # so that from_handle finds it
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
            raise TypeError(f"set_affine_data_place expects a data_place, got "
                            f"{type(dplace).__name__}")
        if dplace._device == AFFINE:
            raise PlaceError("the affine data place of an exec_place cannot itself be "
                             "data_place.affine(); give a concrete place")
        self._affine = dplace

    def get_place(self, idx: int) -> exec_place:
        """Sub-place ``idx``; a scalar place has only ``0``."""
        if isinstance(idx, bool) or not isinstance(idx, int):
            raise TypeError(f"get_place expects an int, got {type(idx).__name__}")
        if idx < 0:
            raise NegativeIndexError(f"get_place: negative index {idx}; a scalar "
                                     "exec_place has only index 0")
        if idx != 0:
            raise IndexError(f"index {idx} out of range for a scalar exec_place "
                             "(only 0 is valid)")
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
        if _product(dims) != len(members):
            raise ValueError(f"cannot reshape a grid of {len(members)} places into "
                             f"grid dims {dims}, which hold {_product(dims)} places; "
                             f"give dims whose product is {len(members)}")
        return exec_place_grid._grid(members, dims, self._affine)

    def collapse_axes(self, first_axis: int, last_axis: int) -> exec_place_grid:
        """Merge axes ``first_axis..last_axis`` (inclusive) into one whose extent is
        their product: dims ``(2, 3, 4)`` with ``(0, 1)`` give ``(6, 4)``."""
        dims = self.dims
        for axis in (first_axis, last_axis):
            if isinstance(axis, bool) or not isinstance(axis, int):
                raise TypeError(f"collapse_axes expects int axes, got "
                                f"{type(axis).__name__}")
        if not 0 <= first_axis <= last_axis < len(dims):
            raise ValueError(f"collapse_axes({first_axis}, {last_axis}): need "
                             f"0 <= first <= last < {len(dims)} for dims {dims}")
        merged = _product(dims[first_axis:last_axis + 1])
        new_dims = dims[:first_axis] + (merged,) + dims[last_axis + 1:]
        return exec_place_grid._grid(self._members(), new_dims, self._affine)

    def __enter__(self) -> exec_place:
        backend = _default_backend()
        saved = self._saved
        if saved is None:
            saved = self._saved = threading.local()
        stack = getattr(saved, "stack", None)
        if stack is None:
            stack = saved.stack = []
        stack.append(backend.current_device())
        if self._device >= 0:
            backend.set_current_device(self._device)
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._saved is not None
        _default_backend().set_current_device(self._saved.stack.pop())

    def __repr__(self) -> str:
        if self._device == HOST:
            return "exec_place(host)"
        return f"exec_place(device={self._device})"


def _product(dims: Sequence[int]) -> int:
    count = 1
    for extent in dims:
        count *= extent
    return count


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
        raise TypeError("exec_place_grid cannot be constructed directly; use "
                        "exec_place_grid.from_devices(ids), .create(places, grid_dims, "
                        "mapper), .machine() or place.reshape(dims)")

    @classmethod
    def _grid(cls, members: Sequence[exec_place], dims: tuple[int, ...],
              affine: data_place | None = None) -> exec_place_grid:
        flat: list[exec_place] = []
        for member in members:
            flat.extend(member._members())      # a grid of grids is flattened
        grid = cls._make(flat[0]._device)
        assert isinstance(grid, exec_place_grid)
        grid._grid_members = tuple(flat)
        grid._grid_dims = dims
        grid._affine = affine
        grid._stream_key = flat[0]._stream_key     # member 0's streams (a partition's)
        return grid

    @staticmethod
    def from_devices(device_ids: Sequence[int]) -> exec_place:
        """A 1-D grid of ``exec_place.device(i)`` for each ``i`` (repeats allowed:
        ``[0, 0]`` is two places on device 0); one device gives the scalar place."""
        try:
            ids = [device_ids[i] for i in range(len(device_ids))]
        except TypeError:
            raise TypeError(f"exec_place_grid.from_devices expects a sequence of device "
                            f"ordinals, got {type(device_ids).__name__}") from None
        if not ids:
            raise ValueError("exec_place_grid.from_devices needs at least one device")
        if len(ids) > MAX_GRID_PLACES:
            raise ValueError(f"exec_place_grid.from_devices: {len(ids)} places, at most "
                             f"{MAX_GRID_PLACES}")
        places = [exec_place.device(i) for i in ids]
        if len(places) == 1:
            return places[0]
        return exec_place_grid._grid(places, (len(places),))

    @staticmethod
    def create(places: Sequence[Any], grid_dims: Any = None, mapper: Any = None, *,
               data_rank: int | None = None) -> exec_place_grid:
        """A grid of ``places`` (C order) with C-order ``grid_dims`` (``None``: 1-D).

        With ``mapper``, ``data_place.composite(grid, mapper)`` becomes the grid's
        affine data place.
        """
        try:
            given = list(places)
        except TypeError:
            raise TypeError(f"exec_place_grid.create expects a sequence of exec_place, "
                            f"got {type(places).__name__}") from None
        members: list[exec_place] = []
        for place in given:
            if not isinstance(place, exec_place):
                convert = getattr(place, "_as_stf_exec_place", None)
                place = convert() if callable(convert) else place
            if not isinstance(place, exec_place):
                raise TypeError(f"exec_place_grid.create: places must be exec_place "
                                f"objects, got {type(place).__name__}")
            members.extend(place._members())
        if not members:
            raise ValueError("exec_place_grid.create needs at least one place")
        if len(members) > MAX_GRID_PLACES:
            raise ValueError(f"exec_place_grid.create: {len(members)} places, at most "
                             f"{MAX_GRID_PLACES}")
        dims = ((len(members),) if grid_dims is None
                else check_extents(grid_dims, "exec_place_grid.create"))
        if _product(dims) != len(members):
            raise ValueError(f"exec_place_grid.create: grid dims {dims} hold "
                             f"{_product(dims)} places, {len(members)} were given")
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
            raise ValueError(f"exec_place_grid.machine: granularity must be 'device' or "
                             f"'locality_domain', got {granularity!r}")
        count = _default_backend().device_count
        if count < 1:
            raise PlaceError("exec_place_grid.machine: this machine has no device")
        if granularity == "device":
            places: list[exec_place] = [exec_place.device(i) for i in range(count)]
        else:
            from .green import locality_domain_places
            places = []
            for device in range(count):
                places.extend(locality_domain_places(device, "backfill"))
        if len(places) == 1:
            return places[0]
        from .partition import blocked
        grid = exec_place_grid._grid(places, (len(places),))
        grid._affine = data_place.composite(grid, blocked())
        return grid

    @staticmethod
    def locality_domains(dev_id: int = 0, sm_split: str = "backfill") -> exec_place_grid:
        """A 1-D grid of device ``dev_id``'s locality domains (one whole-device place
        where the driver reports none)."""
        from .green import locality_domain_places
        return exec_place_grid._grid(locality_domain_places(dev_id, sm_split),
                                     (len(locality_domain_places(dev_id, sm_split)),))

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
            raise NegativeIndexError(f"get_place: negative index {idx}; the grid's "
                                     f"members are 0..{len(members) - 1}")
        if not 0 <= idx < len(members):
            raise IndexError(f"index {idx} out of range for a grid of {len(members)} "
                             "places")
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
        place._device = -next(_layout_numbers)
        place._layout_kind = kind
        place._grid = grid
        place._mapper = mapper
        place._data_rank = None
        _layouts[place._device] = place
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
            "place")

    def deallocate(self, ptr: int, nbytes: int, stream: Any = None) -> None:
        if ptr:
            raise PlaceError(f"{self!r} never allocated memory at 0x{ptr:x}")

    def __repr__(self) -> str:
        return f"data_place({self.kind!r})"
