"""Memory budgets of random task programs.

A device memory budget makes the runtime evict. :func:`task_working_sets` finds the
data each task needs at each device (composite memory is outside the budgets);
:func:`smallest_budget` the smallest budget per device a program runs within, room
for the largest working set, for the data filled on a device and for the partial
results of reductions; :func:`tight_budget` one drawn from the seed above it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._core.reduce import REDUCE
from ._ops import DataSpec, TaskOp
from ._programs import Program

__all__ = ["smallest_budget", "task_working_sets", "tight_budget"]


def _nbytes(spec: DataSpec) -> int:
    if spec.shape is None:
        return 0
    return int(np.prod(spec.shape, dtype=np.int64)) * np.dtype(spec.dtype).itemsize


def task_working_sets(
    program: Program, ops: Sequence[Any] | None = None
) -> list[dict[int, set[int]]]:
    """For every task of ``ops`` (default: the program's): device -> the data it
    needs there."""
    sets = []
    for op in program.ops if ops is None else ops:
        if not isinstance(op, TaskOp) or op.kind != "task":
            continue
        at: dict[int, set[int]] = {}
        for index, _, place in op.deps:
            if program.data[index].shape is None:
                continue
            for device in _devices_of(program, op.place_of_exec, place):
                at.setdefault(device, set()).add(index)
        sets.append(at)
    return sets


def _devices_of(program: Program, exec_place: Any, place: Any) -> list[Any]:
    """The devices whose memory budget a dependency at ``place`` of a task on
    ``exec_place`` uses (composite memory is outside the budgets)."""
    grid = program.grids[exec_place[1]] if isinstance(exec_place, tuple) else None
    if place is None:
        if grid is None:
            return [exec_place] if isinstance(exec_place, int) else []
        return [grid.members[0]] if grid.affine == "device" else []
    if isinstance(place, tuple):
        if place[0] != "replicated":
            return []
        if place[1] is not None:
            return list(program.grids[place[1]].members)
        if grid is not None:
            return list(grid.members)
        return [exec_place] if isinstance(exec_place, int) else []
    return [place] if isinstance(place, int) else []


def smallest_budget(program: Program, groups: Sequence[set[int]] = ()) -> int:
    """The smallest device memory budget ``program`` runs within: the largest
    working set of one task at one device, or of one group of data that must stay
    resident together (the data of an open scope, ``groups``)."""
    need = 0
    for at in task_working_sets(program):
        for indices in at.values():
            need = max(need, sum(_nbytes(program.data[i]) for i in indices))
    for spec in program.data:  # logical_data_full fills on a device
        if spec.origin == "full" and spec.fill_place != "host":
            need = max(need, _nbytes(spec))
    # Partial results of reductions wait in private instances until combined (into
    # the data and a moved copy): room for all of them, at worst on one device.
    reductions = [0] * len(program.data)
    for op in program.ops:
        if isinstance(op, TaskOp):
            for index, mode, _ in op.deps:
                if mode & REDUCE:
                    reductions[index] += 1
    need += sum(
        (count + 2) * _nbytes(program.data[index])
        for index, count in enumerate(reductions)
        if count
    )
    for group in groups:
        need = max(need, sum(_nbytes(program.data[i]) for i in group))
    return need


def tight_budget(seed: int, smallest: int) -> int:
    """A budget drawn from ``seed`` between ``smallest`` and 1.5 times it."""
    return smallest + random.Random(seed * 31 + 7).randint(0, smallest // 2)
