"""Data places (where an instance lives) and execution places (where a task runs).

Places are plain values built by factories (``data_place.device(0)``,
``exec_place.host()``), independent of any context. Direct construction raises
``TypeError`` naming the factories. A factory checks what it can know alone (an
ordinal is an ``int`` and not negative); whether device ``n`` exists is checked when a
context uses the place, against that context's backend (``PlaceError`` naming the
place and the number of devices).
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

from ._errors import PlaceError
from .backends._base import AFFINE, HOST, MANAGED

__all__ = ["data_place", "exec_place", "AFFINE", "check_device_ordinal", "place_name"]

_handles = itertools.count(1)


def _default_backend() -> Any:
    """The configured default backend (``STFLOW_BACKEND``), for the factories that
    resolve the current device now."""
    from .backends import default_backend
    return default_backend(notify=False)


def check_device_ordinal(dev_id: Any, what: str, device_count: int | None = None) -> int:
    """Validate a device ordinal and return it as an ``int``.

    Without ``device_count`` only its type and sign are checked (a context checks
    the rest when it uses the place).

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
        raise PlaceError(f"{what}: device {dev_id} does not exist; device ordinals are "
                         "0 or more")
    if device_count is not None and dev_id >= device_count:
        raise PlaceError(
            f"{what}: device {dev_id} does not exist; valid ordinals are "
            f"0..{device_count - 1} ({device_count} device(s))")
    return dev_id


def place_name(device: int) -> str:
    """How a data place of device number ``device`` prints (``data_place('dev0')``)."""
    if device >= 0:
        return f"data_place('dev{device}')"
    kind = {HOST: "host", MANAGED: "managed", AFFINE: "affine"}.get(device, str(device))
    return f"data_place({kind!r})"


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
        return data_place._make(check_device_ordinal(dev_id, "data_place.device"))

    @staticmethod
    def managed() -> data_place:
        """CUDA managed memory, accessible from the host and every device."""
        return data_place._make(MANAGED)

    @staticmethod
    def affine() -> data_place:
        """The memory of whatever execution place runs the task (the default)."""
        return data_place._make(AFFINE)

    @staticmethod
    def current_device() -> data_place:
        """The current device's memory, resolved now."""
        return data_place._make(_default_backend().current_device())

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
        from .backends import place_allocator
        return place_allocator().allocate(self, nbytes, stream)

    def deallocate(self, ptr: int, nbytes: int, stream: Any = None) -> None:
        """Free memory returned by :meth:`allocate`; ``ptr == 0`` does nothing."""
        from .backends import place_allocator
        place_allocator().deallocate(self, ptr, nbytes, stream)

    def __repr__(self) -> str:
        return place_name(self._device)


class exec_place:
    """Where a task runs: the host or a device.

    Build one with :meth:`host`, :meth:`device` or :meth:`current_device`.
    """

    __slots__ = ("_device", "_affine", "_handle", "_saved", "__weakref__")
    _device: int
    _affine: data_place | None
    _handle: int
    _saved: threading.local | None

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
        return place

    @staticmethod
    def host() -> exec_place:
        """The host. A host task's arguments are host memory."""
        return exec_place._make(HOST)

    @staticmethod
    def device(dev_id: int = 0) -> exec_place:
        """Device ``dev_id``."""
        return exec_place._make(check_device_ordinal(dev_id, "exec_place.device"))

    @staticmethod
    def current_device() -> exec_place:
        """The current device, resolved now."""
        return exec_place._make(_default_backend().current_device())

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
        if idx != 0:
            raise IndexError(f"index {idx} out of range for a scalar exec_place "
                             "(only 0 is valid)")
        return self

    __getitem__ = get_place

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
