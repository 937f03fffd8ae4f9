"""The operations of random task programs: data, tasks, host callbacks, waits.

Plain frozen values shared by the program generators (``_generation``, ``_grids``,
``_scoped``, ``_threaded_generation``) and the oracle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["READ", "RW", "WRITE", "BundleSpec", "DataSpec", "Op", "TaskOp"]

READ, WRITE, RW = 1, 2, 3


@dataclass(frozen=True)
class DataSpec:
    """One logical data of a program."""

    shape: tuple[int, ...] | None  # None for a token
    dtype: str | None
    origin: str  # "array", "full", "empty", "token"
    fill: float = 0.0  # for "full"
    readonly: bool = False  # for "array"
    fill_place: Any = None  # for "full": None, "host" or a device ordinal
    accumulator: str | None = None  # "add" or "mul": only reduced into and read
    view: Any = None  # for "array": a strided view of a parent array,
    # (parent number, parent shape, ((start, step) per axis)); see _parents.add_views


@dataclass(frozen=True)
class BundleSpec:
    """Deps ``start`` .. ``start + count`` of a task, submitted as one bundle.

    ``fields``: per field ``(name, data index, acquired, constant)`` in order (the
    acquired fields are those deps, in that order); ``how``: ``"read"``, ``"rw"``,
    ``"write"`` or ``"dep"`` with the modes ``explicit`` (``(name, mode)``, mode 0
    for ``AccessMode.NONE``); ``run``: the body uses ``t.run``.
    """

    start: int
    count: int
    fields: tuple[tuple[str, int, bool, bool], ...]
    how: str
    explicit: tuple[tuple[str, int], ...] = ()
    run: bool = False


@dataclass(frozen=True)
class TaskOp:
    """A task (``kind="task"``) or a host callback (``kind="host_launch"``).

    ``deps`` holds ``(data index, mode, place)``; ``place`` is ``None`` (affine),
    ``"host"``, ``"managed"``, a device ordinal, or ``("composite" | "replicated", k)``
    (``_grids``). ``place_of_exec`` is ``"host"``, a device ordinal or ``("grid", k)``. ``launch`` says whether the body enqueues its work on the task
    stream rather than touching the data on the host directly.
    """

    kind: str
    deps: tuple[tuple[int, int, Any], ...]
    coef: float
    place_of_exec: Any = 0
    launch: bool = False
    member: int = 0  # on a grid: the member whose stream runs it
    bundle: BundleSpec | None = None  # some deps submitted as one bundle


@dataclass(frozen=True)
class Op:
    """``wait`` (of ``data``), ``fence`` or ``drop`` (of ``data``)."""

    kind: str
    data: int = -1


def _same(actual: np.ndarray, expected: np.ndarray, exact: bool) -> bool:
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return False
    if exact:
        return bool(np.array_equal(actual, expected, equal_nan=True))
    rtol = 1e-5 if expected.dtype == np.float32 else 1e-12
    return bool(np.allclose(actual, expected, rtol=rtol, atol=rtol, equal_nan=True))
