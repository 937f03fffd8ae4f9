"""Grids of places in random task programs: grid tasks, composite and replicated data.

:func:`add_grids` turns some tasks of a generated program into tasks on a grid of
places, and some of their dependencies into accesses at a composite place (data
spread over a grid by a mapper: blocked, cyclic, or a random per-chunk choice) or,
for reads, at a replicated place (a copy per grid member, bound to a grid or deferred
to the task's). The oracle is unchanged: places never change values, only where the
bytes live. A grid task's body runs on the stream of a random member
(``task.get_stream_at_index``), so the fork (members start after the data is ready)
and the join (the task ends after every member) are both exercised.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from ._ops import READ, WRITE, TaskOp

__all__ = ["Built", "GridSpec", "add_grids"]


@dataclass(frozen=True)
class GridSpec:
    """A grid of a program: member device ordinals (C order), C-order dims, the
    mapper of its composite place, and its affine data place (``"composite"``, or
    ``"device"``: member 0's device memory)."""

    members: tuple[int, ...]
    dims: tuple[int, ...]
    mapper: str  # "blocked", "cyclic:<bytes>" or "random:<seed>"
    affine: str


def add_grids(
    rng: random.Random, ops: list[Any], devices: int, grids: list[GridSpec]
) -> list[Any]:
    """``ops`` with some tasks moved to grids and some dependencies to composite or
    replicated places (``grids`` receives the grids used)."""
    for _ in range(rng.randint(1, 3)):
        size = rng.choice([2, 2, 3, 4])
        members = tuple(rng.randrange(devices) for _ in range(size))
        dims = (2, 2) if size == 4 and rng.random() < 0.5 else (size,)
        mapper = rng.choice(
            [
                "blocked",
                f"cyclic:{rng.choice([256, 512, 4096])}",
                f"random:{rng.randrange(1 << 30)}",
            ]
        )
        grids.append(
            GridSpec(
                members, dims, mapper, rng.choice(["composite", "composite", "device"])
            )
        )
    result = []
    for op in ops:
        if not isinstance(op, TaskOp) or op.kind != "task" or rng.random() < 0.6:
            result.append(op)
            continue
        counts: dict[int, int] = {}
        for index, _, _ in op.deps:
            counts[index] = counts.get(index, 0) + 1
        deps = []
        for index, mode, place in op.deps:
            if (
                counts[index] == 1
                and mode in (READ, WRITE, READ | WRITE)
                and place != "token"
                and rng.random() < 0.4
            ):
                if mode == READ and rng.random() < 0.4:
                    place = ("replicated", rng.choice([None, rng.randrange(len(grids))]))
                else:
                    place = ("composite", rng.randrange(len(grids)))
            deps.append((index, mode, place))
        place_of_exec = op.place_of_exec
        member = 0
        if rng.random() < 0.7:
            grid = rng.randrange(len(grids))
            place_of_exec = ("grid", grid)
            member = rng.randrange(len(grids[grid].members))
        result.append(
            TaskOp(op.kind, tuple(deps), op.coef, place_of_exec, op.launch, member)
        )
    return result


def _mapper(text: str) -> Any:
    from .. import partitions

    if text == "blocked":
        return partitions.blocked()
    kind, _, value = text.partition(":")
    if kind == "cyclic":
        return partitions.cyclic(int(value))
    seed = int(value)

    def scattered(coords: Any, dims: Any, grid: Any) -> tuple[int, ...]:
        count = grid[0] * grid[1] * grid[2] * grid[3]
        member = ((coords[0] // 256) * 2654435761 + seed) % (1 << 32) % count
        return (
            member % grid[0],
            member // grid[0] % grid[1],
            member // (grid[0] * grid[1]) % grid[2],
            member // (grid[0] * grid[1] * grid[2]),
        )

    return scattered


class Built:
    """The stflow objects of a program's grids, built once per run: the grids (each
    with its affine data place), a composite place per grid, replicated places."""

    def __init__(self, stf: Any, specs: list[GridSpec]) -> None:
        self.grids: list[Any] = []
        self.composites: list[Any] = []
        for spec in specs:
            places = [stf.exec_place.device(device) for device in spec.members]
            mapper = _mapper(spec.mapper)
            grid = stf.exec_place_grid.create(places, spec.dims)
            composite = stf.data_place.composite(grid, mapper)
            grid.set_affine_data_place(
                composite
                if spec.affine == "composite"
                else stf.data_place.device(spec.members[0])
            )
            self.grids.append(grid)
            self.composites.append(composite)
        self.replicated: dict[int | None, Any] = {None: stf.data_place.replicated()}
        for k, grid in enumerate(self.grids):
            self.replicated[k] = stf.data_place.replicated(grid)

    def dep_place(self, place: Any) -> Any:
        """The data place of a ``("composite", k)`` or ``("replicated", k)`` spec."""
        kind, grid = place
        return self.replicated[grid] if kind == "replicated" else self.composites[grid]

    def exec_place(self, place: Any) -> Any:
        """The grid of a ``("grid", k)`` execution place."""
        return self.grids[place[1]]
