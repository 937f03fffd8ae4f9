"""Ready-made partition mappers for ``data_place.composite(grid, mapper)``.

Each is a mapper under the reference's contract (``stflow._places.partition`` explains it:
native-order 4-tuples, the data seen as bytes), so it can be passed wherever a
hand-written mapper can::

    grid = stf.exec_place_grid.from_devices([0, 1])
    halves = stf.data_place.composite(grid, stf.partitions.blocked())

- :class:`blocked` — equal contiguous parts, in member order (for C-ordered data, a
  blocked partition along the slowest axis);
- :class:`cyclic` — blocks of ``block_bytes`` dealt round robin;
- :class:`tiled` — blocked along any ``axis`` of data of a given shape.
"""

from __future__ import annotations

from ._places.partition import blocked, cyclic, tiled

__all__ = ["blocked", "cyclic", "tiled"]
