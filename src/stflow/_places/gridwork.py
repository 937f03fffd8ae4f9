"""Work on grids of places: composite instances, and one stream per grid member.

Composite instances (``data_place.composite(grid, mapper)``)
    :func:`allocate_composite` asks the backend for its chunk size (on CUDA the
    virtual-memory granularity of the grid's devices), runs the mapper once per chunk
    (``partition.chunk_owners``) and has the backend map each chunk in the memory of
    the member that owns it. The instance is then one address range: a task body
    sees the whole array, and each member's part lives in its own memory.

A task on a grid (``ctx.task(grid, ...)``)
    The runtime acquires the task's data on the stream of member 0 as for any task
    (copies included). :func:`fork` then gives every other member a stream of its
    own place, ordered after that prologue; the body enqueues member ``i``'s work on
    ``task.get_stream_at_index(i)``. :func:`join` makes member 0's stream wait for the
    others before the task's end is recorded on it, so later tasks order after the
    work of every member. Members on the same place get distinct streams of its pool
    while it has enough.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._core.errors import PlaceError
from .numbering import COMPOSITE, layout_place
from .partition import chunk_owners, chunk_size

if TYPE_CHECKING:
    from .._core.streams import StreamPools
    from ..backends._base import Backend, CompositeAllocation, Stream
    from .places import exec_place_grid

__all__ = ["allocate_composite", "fork", "join"]


def allocate_composite(
    backend: Backend,
    place: int,
    nbytes: int,
    dtype: np.dtype,
    shape: tuple[int, ...],
    what: Any,
) -> CompositeAllocation:
    """An instance of ``nbytes`` at composite place number ``place``.

    Raises
    ------
    PlaceError
        The place no longer exists, or the backend has no composite places.
    ValueError
        The mapper returned a coordinate outside the grid.
    Exception
        Whatever the mapper raised.
    """
    layout = layout_place(place)
    if layout is None or layout._layout_kind != COMPOSITE or layout._grid is None:
        raise PlaceError(f"{what}: the composite place of this instance no longer exists")
    grid = layout._grid
    members = grid._members()
    member_devices = [
        member._device if member._affine is None else member._affine._device
        for member in members
    ]
    chunk = chunk_size(nbytes, backend.composite_granularity(member_devices))
    owners = chunk_owners(
        layout._mapper,
        nbytes,
        chunk,
        grid.dims,
        f"{what}: data_place.composite mapper {layout._mapper!r}",
        layout._data_rank,
        shape,
        dtype.itemsize,
    )
    return backend.allocate_composite(
        place, [member_devices[i] for i in owners], chunk, nbytes, dtype
    )


def fork(
    backend: Backend, pools: StreamPools, grid: exec_place_grid, main: Stream
) -> list[Stream]:
    """One stream per member of ``grid`` (``main`` for member 0), each ordered
    after the work enqueued on ``main`` so far."""
    streams = [main]
    ready = None
    for member in grid._members()[1:]:
        pool = pools.pool(member._stream_key)
        stream = pool.next_stream()
        for _ in range(len(pool.streams) - 1):
            if stream not in streams:
                break
            stream = pool.next_stream()
        if stream is not main:
            if ready is None:
                ready = backend.record(main)
            backend.wait(stream, ready)
        streams.append(stream)
    return streams


def join(backend: Backend, streams: list[Stream]) -> None:
    """Make ``streams[0]`` wait for the work enqueued on the others."""
    main = streams[0]
    seen = {main}
    for stream in streams[1:]:
        if stream not in seen:
            seen.add(stream)
            backend.wait(main, backend.record(stream))
