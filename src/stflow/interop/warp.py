"""NVIDIA Warp arrays for task arguments.

A task view becomes a non-owning ``warp.array`` over the instance (``ptr=``,
zero-copy). On the CUDA backend its device is the GPU holding the data and
:class:`warp_task` makes the task stream Warp's current stream
(``warp.ScopedStream`` of a ``warp.Stream`` wrapping the handle), so kernels launched
in the body are ordered after the task's prerequisites and before its end.

On the emulated backend the arrays are Warp CPU arrays over the emulated memory and
Warp's current stream is left alone: CPU launches run synchronously in the body, after
the prerequisites.
"""

from __future__ import annotations

from typing import Any

from ..backends._base import HOST
from ._common import (
    TaskScope,
    backend_of,
    gpu_memory,
    import_framework,
    task_device,
    views_of,
)

__all__ = ["warp_arg", "warp_arguments", "warp_task"]


def _warp() -> Any:
    wp = import_framework("warp", "warp", "NVIDIA Warp (warp-lang)")
    wp.init()
    return wp


def _array(wp: Any, task: Any, view: Any) -> Any:
    dtype = wp.dtype_from_numpy(view.dtype)
    if gpu_memory(task):
        where = backend_of(task).locate(view.ptr)
        device = (
            "cpu"
            if where == HOST
            else f"cuda:{where if where >= 0 else task_device(task)}"
        )
    else:
        device = "cpu"
    return wp.array(
        ptr=view.ptr, dtype=dtype, shape=view.shape, strides=view.strides, device=device
    )


def warp_arg(task: Any, index: int) -> Any:
    """A zero-copy Warp array of dependency ``index`` of a started task."""
    wp = _warp()
    return _array(wp, task, task.get_arg_cai(index))


def warp_arguments(task: Any) -> Any:
    """Warp arrays of the non-token dependencies, like ``args_cai()``: ``None``, one
    array, or a tuple."""
    wp = _warp()
    arrays = tuple(_array(wp, task, view) for view in views_of(task))
    if not arrays:
        return None
    return arrays[0] if len(arrays) == 1 else arrays


class warp_task(TaskScope):
    """``with warp_task(ctx, *deps, symbol=None) as arrays:`` a task whose body uses
    Warp.

    Entering starts the task, makes its stream Warp's current stream (CUDA backend)
    and yields a tuple of Warp arrays, one per non-token dependency.

    Notes
    -----
    Exit leaves the stream scope, then ends the task; the body's exception wins over a
    scope-exit error, which wins over an ``end()`` error.
    """

    def __init__(self, ctx: Any, *args: Any, symbol: str | None = None) -> None:
        self._wp = _warp()
        super().__init__(ctx, args, symbol)

    def open_scope(self, scope: Any) -> None:
        if not gpu_memory(self.task):
            return
        wp = self._wp
        device = wp.get_device(f"cuda:{task_device(self.task)}")
        stream = wp.Stream(device, cuda_stream=int(self.task.stream_ptr()))
        scope.enter_context(wp.ScopedStream(stream, sync_enter=False))

    def result(self) -> Any:
        return tuple(_array(self._wp, self.task, view) for view in views_of(self.task))
