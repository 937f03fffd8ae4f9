"""Access modes: how a task touches a logical data.

One spelling everywhere: the public :class:`AccessMode` flag, and the plain ``int``
constants :data:`READ`, :data:`WRITE` and :data:`RW` derived from it, which the hot
path tests with ``mode & WRITE`` (enum arithmetic would cost a Python call per test).
A dependency stores its mode as a plain ``int``; a reduction's mode also carries its
operation (``_core/reduce.py``).
"""

from __future__ import annotations

import enum
from typing import Final

from .reduce import reduce_op, valid_reduce_mode

__all__ = ["AccessMode", "READ", "RW", "WRITE", "mode_name"]


class AccessMode(enum.IntFlag):
    """How a task accesses a logical data."""

    NONE = 0
    READ = 1
    WRITE = 2
    RW = 3
    REDUCE = 4
    """A reduction (stflow-only): ``ld.reduce(op)``; the mode alone means ``"sum"``."""


READ: Final[int] = AccessMode.READ.value
"""The access reads the data (``ld.read()``)."""
WRITE: Final[int] = AccessMode.WRITE.value
"""The access writes the data; its previous value is not read (``ld.write()``)."""
RW: Final[int] = AccessMode.RW.value
"""The access reads and writes the data (``ld.rw()``)."""

_NAMES: Final[dict[int, str]] = {READ: "read", WRITE: "write", RW: "rw"}


def mode_name(mode: int) -> str:
    """``"read"``, ``"write"``, ``"rw"`` or ``"reduce(<op>)"``; ``KeyError`` for
    anything else."""
    name = _NAMES.get(mode)
    if name is None:
        if not valid_reduce_mode(mode):
            raise KeyError(mode)
        return f"reduce({reduce_op(mode).name})"
    return name


def is_mode(mode: object) -> bool:
    """True for the access modes a dependency may have (``READ``, ``WRITE``, ``RW``,
    and reductions)."""
    if isinstance(mode, bool) or not isinstance(mode, int):
        return False
    return int(mode) in _NAMES or valid_reduce_mode(int(mode))
