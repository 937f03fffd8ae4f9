"""Stream partitions: where the streams of green and ``from_context`` places live.

A :class:`StreamPartition` names an SM partition (a green context) or a foreign CUDA
context of one device. Execution places hold theirs and use its unique ``key`` as
their stream key (``exec_place._stream_key``), so the runtime keeps a separate stream
pool for it (``_streams.StreamPools``) and creates that pool's streams in the
partition. Keys start at :data:`PARTITION_KEYS`, above every device number.

This module imports nothing of stflow (``_core.streams`` imports it) and is not compiled
(``_compile.COMPILED_MODULES``): partitions are weakly referenced, which compiled
classes do not support.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any, Final

__all__ = ["PARTITION_KEYS", "StreamPartition", "partition_of"]

PARTITION_KEYS: Final = 1 << 20
"""The first stream key of partitions (device numbers and place sentinels are below)."""

_partition_keys = itertools.count(PARTITION_KEYS)
_partitions: weakref.WeakValueDictionary[int, StreamPartition] = (
    weakref.WeakValueDictionary()
)


class StreamPartition:
    """Where the streams of a partitioned execution place are created.

    Parameters
    ----------
    device : int
        The device the partition belongs to.
    native : object
        What the backend needs to create streams in it, from its
        ``context_partition``: on CUDA a ``_cuda_green.ContextPartition`` (the
        ``CUcontext`` and the object keeping it alive), on the emulated backend the
        ``EmulatedContext`` (the partition labels streams of a virtual device).
    label : str
        How it prints (``green_ctx(dev=0, ctx=1)``).
    sm_count : int
        Its SMs (``0``: unknown, a foreign context).

    Notes
    -----
    Places hold their partition; the registry holds it weakly, so a partition lives
    as long as a place (or a stream) names it. ``key`` is unique in the process.
    """

    __slots__ = ("key", "device", "native", "label", "sm_count", "__weakref__")

    def __init__(self, device: int, native: Any, label: str, sm_count: int = 0) -> None:
        self.key = next(_partition_keys)
        self.device = device
        self.native = native
        self.label = label
        self.sm_count = sm_count
        _partitions[self.key] = self

    def __repr__(self) -> str:
        return self.label


def partition_of(key: int) -> StreamPartition | None:
    """The partition of stream key ``key`` (``None`` for a device number)."""
    if key < PARTITION_KEYS:
        return None
    partition = _partitions.get(key)
    if partition is None:
        raise LookupError(f"stream key {key} names no live partition")
    return partition
