"""How places are numbered and found again: place numbers, handles, extents.

A place is a number for the runtime: a device ordinal, a sentinel of
``backends/_base.py`` (``HOST``, ``MANAGED``, ``AFFINE``), or for a composite or
replicated data place a number of its own at or below :data:`LAYOUT_IDS`
(:func:`next_layout_number`; :func:`layout_place` finds the place again). Users
see places through handles (``place._handle_int``, ``from_handle``), given here.
Nothing here builds a place (``places.py`` does).
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Sequence
from typing import Any

from .._core.errors import PlaceError
from ..backends._base import AFFINE, HOST, MANAGED

__all__ = [
    "COMPOSITE",
    "LAYOUT_DEVICE_ID",
    "LAYOUT_IDS",
    "MAX_GRID_PLACES",
    "REPLICATED",
    "check_extents",
    "from_handle",
    "handle_of",
    "layout_place",
    "next_handle",
    "next_layout_number",
    "place_name",
    "product",
    "register_handle",
]

_handles = itertools.count(1)


def next_handle() -> int:
    """A new handle (an ``exec_place`` takes one when it is made)."""
    return next(_handles)


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


def next_layout_number(place: Any) -> int:
    """A new place number for the composite or replicated place ``place``, which
    :func:`layout_place` returns while it lives."""
    number = -next(_layout_numbers)
    _layouts[number] = place
    return number


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
        raise TypeError(
            f"{what}: extents must be an int or a tuple of ints, got "
            f"{type(dims).__name__}"
        )
    for extent in dims:
        if isinstance(extent, bool) or not isinstance(extent, int):
            raise TypeError(
                f"{what}: extents must be Python ints, got "
                f"{type(extent).__name__} in {tuple(dims)!r}"
            )
    if not 1 <= len(dims) <= 4:
        raise ValueError(
            f"{what}: a grid has 1 to 4 axes, got {len(dims)} ({tuple(dims)!r})"
        )
    if any(extent <= 0 for extent in dims):
        raise ValueError(f"{what}: extents must be positive, got {tuple(dims)!r}")
    return tuple(int(extent) for extent in dims)


def place_name(device: int) -> str:
    """How a data place of device number ``device`` prints (``data_place('dev0')``)."""
    if device >= 0:
        return f"data_place('dev{device}')"
    kind = {HOST: "host", MANAGED: "managed", AFFINE: "affine"}.get(device, str(device))
    return f"data_place({kind!r})"


_registered: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
"""Places whose ``_handle_int`` was asked for, by handle (``from_handle``)."""
_data_handles: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def handle_of(place: Any) -> int:
    """The handle of a data place (given on first request, then stable)."""
    handle = _data_handles.get(place)
    if handle is None:
        handle = _data_handles[place] = next_handle()
        _registered[handle] = place
    return handle


def register_handle(handle: int, place: Any) -> None:
    """Let :func:`from_handle` find ``place`` by ``handle`` while it lives."""
    _registered[handle] = place


def from_handle(h: Any, cls: type) -> Any:
    """The live place of class ``cls`` whose ``_handle_int`` is ``h``."""
    what = f"{cls.__name__}.from_handle"
    if isinstance(h, bool) or not isinstance(h, int):
        raise TypeError(f"{what} expects an int handle, got {type(h).__name__}")
    if h == 0:
        raise ValueError(
            f"{what}: the handle is NULL (0); pass place._handle_int of a live place"
        )
    place = _registered.get(int(h))
    if place is None or not isinstance(place, cls):
        raise PlaceError(
            f"{what}: {h} is not the handle of a live {cls.__name__}; "
            f"handles come from {cls.__name__}._handle_int and name "
            "places of this process while they are alive"
        )
    return place


def product(dims: Sequence[int]) -> int:
    """The number of places of a grid of C-order ``dims``."""
    count = 1
    for extent in dims:
        count *= extent
    return count
