"""The view of one green context, which the green-context place factories take.

``exec_place.green_ctx(view)`` and ``data_place.green_ctx(view)`` take a
:class:`green_ctx_view`. A ``green_context_helper`` (``green.py``) makes the views of
its green contexts; the place factories (``places.py``) build places on a view's
``StreamPartition``. The view sits below both, so that the factories need not import
the helper.
"""

from __future__ import annotations

from typing import Any

from .stream_partitions import StreamPartition

__all__ = ["green_ctx_view"]


class green_ctx_view:
    """One green context of a ``green_context_helper`` (which it keeps alive).

    Get one with ``helper.get_view(idx)``.
    """

    __slots__ = ("_helper", "_index", "_partition")
    _helper: Any
    _index: int
    _partition: StreamPartition

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "green_ctx_view cannot be constructed directly; use "
            "green_context_helper(sm_count, dev_id).get_view(idx)"
        )

    @classmethod
    def _make(cls, helper: Any, index: int, partition: StreamPartition) -> green_ctx_view:
        view = cls.__new__(cls)
        view._helper = helper
        view._index = index
        view._partition = partition
        return view

    @property
    def helper(self) -> Any:
        """The ``green_context_helper`` this view belongs to."""
        return self._helper

    @property
    def index(self) -> int:
        return self._index

    @property
    def device_id(self) -> int:
        return self._partition.device

    def __repr__(self) -> str:
        return f"green_ctx_view(device_id={self.device_id}, index={self._index})"
