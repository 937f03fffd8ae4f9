"""Green contexts: a device's SMs split into partitions, one execution place each.

A *green context* owns a subset of a device's SMs: kernels launched on its streams
run only on those SMs. stflow models each one as a
:class:`~stflow._places.stream_partitions.StreamPartition` held by an execution
place; the runtime creates the place's streams *in* the partition
(``backend.create_stream(device, sink, partition)``), so every task on the place
runs within its SMs, in stream and in graph mode (captured streams are the
partition's too, so kernel nodes keep their green context when the graph is
instantiated from them).

Three ways in, as in the reference:

``green_context_helper(sm_count, dev_id)``
    splits the device into as many partitions of ``sm_count`` SMs as fit;
    ``helper.get_view(i)`` names one, for ``exec_place.green_ctx(view)`` and
    ``data_place.green_ctx(view)``.
``green_places(sms_per_place, n_places, device_id, coscheduled_sm_count)``
    the same, returning ``exec_place.from_context`` places.
``exec_place.from_context(ctx, dev_id=-1)``
    a place bound to an existing context: an ``int`` ``CUcontext`` or an object with
    ``.handle`` (a ``cuda.core`` ``Context``, green or not). A device's primary
    context gives an ordinary device place.

The split is the backend's (``Backend.split_device``, ``backends/_base.py``): on
CUDA ``cuda.core`` green contexts (``backends/_cuda_green.py``); on the emulated and
null backends virtual devices of 32 SMs split in multiples of 2, whose partitions
label their streams without throttling work, and whose "contexts" are
``EmulatedContext`` objects (``backends/_emulated_green.py``), what ``green_places``
returns as ``backing_context`` there. This module builds places on the factories of
``places.py`` and imports no backend.
"""

from __future__ import annotations

from typing import Any

from .._core.errors import BackendUnavailableError, NegativeIndexError
from .green_view import green_ctx_view
from .locality import checked_device, locality_domain_count
from .places import exec_place, locality_domain_places
from .stream_partitions import StreamPartition

__all__ = [
    "green_context_helper",
    "green_ctx_view",
    "green_places",
    "locality_domain_count",
    "locality_domain_places",
]


def _check_positive(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return int(value)


class green_context_helper:
    """Green contexts of ``sm_count`` SMs each, as many as fit on device ``dev_id``.

    Parameters
    ----------
    sm_count : int
        SMs per green context (rounded up by the driver to its granularity).
    dev_id : int
        The device to partition.

    Raises
    ------
    ValueError
        ``sm_count < 1``.
    PlaceError
        ``dev_id`` is not a device of the default backend.
    RuntimeError
        The device cannot be partitioned so (no driver support, too few SMs).
    """

    __slots__ = ("_device", "_sm_count", "_partitions", "_contexts", "__weakref__")
    _contexts: list[Any]
    _partitions: list[StreamPartition]

    def __init__(self, sm_count: int, dev_id: int = 0) -> None:
        if isinstance(sm_count, bool) or not isinstance(sm_count, int):
            raise TypeError(f"sm_count must be an int, got {type(sm_count).__name__}")
        if sm_count < 1:
            raise ValueError(f"sm_count must be a positive integer, got {sm_count}")
        backend, device = checked_device(dev_id, "green_context_helper")
        self._device = device
        self._sm_count = sm_count
        try:
            contexts = backend.split_device(device, sm_count, None, 0)
        except BackendUnavailableError as exc:  # the reference raises RuntimeError here
            raise RuntimeError(f"green_context_helper: {exc}") from exc
        self._contexts = [ctx for ctx, _ in contexts]  # they keep the partitions alive
        self._partitions = []
        for i, (ctx, sms) in enumerate(contexts):
            _, native = backend.context_partition(ctx, int(ctx.handle))
            self._partitions.append(
                StreamPartition(device, native, f"green_ctx(dev={device}, ctx={i})", sms)
            )

    def get_count(self) -> int:
        """The number of green contexts."""
        return len(self._partitions)

    def __len__(self) -> int:
        return len(self._partitions)

    @property
    def device_id(self) -> int:
        return self._device

    def get_view(self, idx: int) -> green_ctx_view:
        """Green context ``idx``; out of range or negative → ``IndexError``."""
        if isinstance(idx, bool) or not isinstance(idx, int):
            raise TypeError(f"get_view expects an int, got {type(idx).__name__}")
        count = len(self._partitions)
        if idx < 0:
            raise NegativeIndexError(
                f"get_view: negative green context index {idx}; "
                f"this helper has 0..{count - 1}"
            )
        if not 0 <= idx < count:
            raise IndexError(
                f"green context index {idx} out of range: this helper of "
                f"device {self._device} has {count} (0..{count - 1})"
            )
        return green_ctx_view._make(self, idx, self._partitions[idx])

    def __repr__(self) -> str:
        return f"green_context_helper(device_id={self._device}, count={self.get_count()})"


def green_places(
    sms_per_place: int,
    n_places: int | None = None,
    device_id: int = 0,
    coscheduled_sm_count: int = 0,
) -> list[exec_place]:
    """Partition a device's SMs into green contexts, one execution place each.

    Parameters
    ----------
    sms_per_place : int
        SMs per place (rounded up to the device's minimum partition size).
    n_places : int, optional
        How many places; ``None``: as many as fit.
    device_id : int
        The device to partition.
    coscheduled_sm_count : int
        Co-scheduling constraint applied to every group (CUDA 13.1 structured split).

    Returns
    -------
    list of exec_place
        ``exec_place.from_context(ctx)`` for each green context ``ctx``, which the
        place keeps alive and returns as ``backing_context``.

    Raises
    ------
    ValueError
        ``sms_per_place`` or ``n_places`` not positive.
    PlaceError
        Bad ``device_id``.
    RuntimeError
        Fewer groups than ``n_places`` fit.
    BackendUnavailableError
        CUDA backend without ``cuda.core`` 1.0, which green contexts need (the
        reference raises ``RuntimeError``).

    Notes
    -----
    The caller's current CUDA context is restored on return (a failure to restore
    is raised only when nothing else is propagating).
    """
    sms_per_place = _check_positive(sms_per_place, "sms_per_place")
    if n_places is not None:
        n_places = _check_positive(n_places, "n_places")
    if isinstance(coscheduled_sm_count, bool) or not isinstance(
        coscheduled_sm_count, int
    ):
        raise TypeError(
            f"coscheduled_sm_count must be an int, got "
            f"{type(coscheduled_sm_count).__name__}"
        )
    if coscheduled_sm_count < 0:
        raise ValueError(
            f"coscheduled_sm_count must be 0 or more, got {coscheduled_sm_count}"
        )
    backend, device = checked_device(device_id, "green_places")
    contexts = backend.split_device(device, sms_per_place, n_places, coscheduled_sm_count)
    return [exec_place.from_context(ctx, device) for ctx, _ in contexts]
