"""Strided user arrays of random programs: views of parent arrays, and the check that
nothing outside them changed (see ``_programs``' module docstring)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from ._ops import DataSpec, _same

__all__ = ["add_views", "parent_problems"]


def add_views(seed: int, data: list[DataSpec]) -> list[DataSpec]:
    """Make some user arrays of ``data`` strided views of parent arrays.

    Drawn from their own generator, so the rest of a program does not change: about
    a third of the arrays become views with steps and offsets in a parent of their
    own; pairs or triples of 2-D arrays of one dtype become tiles side by side in one
    parent matrix (their rows resized to the first's), and of 1-D arrays rows of one
    parent interleaved with a step (their lengths made the first's). The shapes
    change only there, before any operation is drawn.
    """
    rng = random.Random(seed * 1_000_003 + 11)
    data = list(data)
    candidates = [
        i
        for i, spec in enumerate(data)
        if spec.origin == "array" and spec.shape and 0 not in spec.shape
    ]
    rng.shuffle(candidates)
    parent = 0
    while candidates:
        first = candidates.pop()
        roll = rng.random()
        if roll < 0.45:
            continue
        spec = data[first]
        shape = spec.shape
        assert shape is not None
        together = [first]
        if roll < 0.75:  # several data in one parent
            together += [
                i
                for i in candidates
                if data[i].dtype == spec.dtype and len(data[i].shape or ()) == len(shape)
            ][: rng.randint(1, 2)]
            for i in together[1:]:
                candidates.remove(i)
        if len(together) == 1:  # a view of a parent of its own
            steps = tuple((rng.randint(0, 2), rng.choice([1, 1, 2, 3])) for _ in shape)
            if all(step == 1 for _, step in steps) and len(shape) == 1:
                steps = ((steps[0][0], 2),)
            outer = tuple(
                start + (n - 1) * step + 1 + rng.randint(0, 2)
                for n, (start, step) in zip(shape, steps)
            )
            data[first] = _view_of(spec, shape, (parent, outer, steps))
        elif len(shape) == 1:  # rows of one parent, interleaved
            count = len(together)
            n = shape[0]
            for k, i in enumerate(together):
                data[i] = _view_of(data[i], (n,), (parent, (n * count,), ((k, count),)))
        else:  # tiles side by side
            rows = shape[0]
            column = rng.randint(0, 1)
            for i in together:
                cols = (data[i].shape or (1, 1))[1]
                data[i] = _view_of(
                    data[i], (rows, cols), (parent, (), ((1, 1), (column, 1)))
                )
                column += cols + rng.randint(0, 1)
            width = column + rng.randint(0, 1)
            for i in together:
                tile = data[i]
                assert tile.shape is not None
                data[i] = _view_of(
                    tile, tile.shape, (parent, (rows + 2, width), tile.view[2])
                )
        parent += 1
    return data


def _view_of(spec: DataSpec, shape: tuple[int, ...], view: Any) -> DataSpec:
    return DataSpec(
        shape,
        spec.dtype,
        spec.origin,
        spec.fill,
        spec.readonly,
        spec.fill_place,
        spec.accumulator,
        view,
    )


def _view_index(spec: DataSpec) -> tuple[slice, ...]:
    """The slices of a view's elements in its parent."""
    assert spec.shape is not None
    return tuple(
        slice(start, start + (n - 1) * step + 1, step)
        for n, (start, step) in zip(spec.shape, spec.view[2])
    )


def _parent_values(program: Any, number: int, spec: DataSpec) -> np.ndarray:
    """A parent array as registered: values drawn from the seed (what must still
    be there after the run, outside the views)."""
    rng = np.random.default_rng([program.seed, 7, number])
    return rng.uniform(-4, 4, spec.view[1]).astype(spec.dtype)


def parent_problems(
    program: Any, got: dict[int, np.ndarray], want: dict[int, np.ndarray], exact: bool
) -> list[str]:
    """Compare the parents of the views among the final user arrays ``got`` with
    their values drawn from the seed, the views' elements replaced by ``want``:
    a write-back that touched a byte outside its view is a difference."""
    problems = []
    parents: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for i, spec in enumerate(program.data):
        if spec.view is None or i not in got or i not in want:
            continue
        number = spec.view[0]
        if number not in parents:
            actual = got[i].base
            assert isinstance(actual, np.ndarray)
            parents[number] = (actual, _parent_values(program, number, spec))
        parents[number][1][_view_index(spec)] = want[i]
    for number, (actual, expected) in parents.items():
        if not _same(actual, expected, exact):
            wrong = np.argwhere(~np.isclose(actual, expected, equal_nan=True))
            problems.append(
                f"parent array {number} (views of it: "
                f"{[i for i, s in enumerate(program.data) if s.view and s.view[0] == number]}) "
                f"differs at {wrong[:4].tolist()}: bytes outside a view "
                "were written, or a view's write-back is wrong"
            )
    return problems
