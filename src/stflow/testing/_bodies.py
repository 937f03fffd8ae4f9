"""Body strategies: how the body of a generated task runs inside its window.

A strategy (:data:`BodyRunner`, ``body(task, op, modes)``) applies ``task_body``
(``_programs``) to the task's views in dependency order, a bundle's fields flattened:
on the emulated backend by direct host access or an emulated launch (always a launch
in graph mode, where a captured body may not touch the data), on the null backend by
direct host access or, in graph mode, as work launched on the body's stream, on CUDA
as CuPy kernels on the task stream. :func:`body_for` picks one for a backend; host
callbacks run ``task_body`` on their arguments (``_host_fn``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._ops import TaskOp
from ._programs import task_body

__all__ = [
    "BodyRunner",
    "body_for",
    "cupy_body",
    "emulated_body",
    "emulated_graph_body",
    "flatten_bundles",
    "host_body",
    "launched_body",
]

BodyRunner = Callable[[Any, TaskOp, list[int]], None]
"""``body(task, op, modes)``: run the body of a generated task inside its window."""


def emulated_body(t: Any, op: TaskOp, modes: list[int]) -> None:
    """Body strategy for the emulated backend: direct host access or a launch."""
    _emulated(t, op, modes, op.launch)


def host_body(t: Any, op: TaskOp, modes: list[int]) -> None:
    """Body strategy for the null backend: direct host access (its device memory is
    host memory and all earlier work has completed when a body runs)."""
    _emulated(t, op, modes, False)


def emulated_graph_body(t: Any, op: TaskOp, modes: list[int]) -> None:
    """Body strategy for graph mode on the emulated backend: always a launch (what a
    captured body enqueues is recorded; direct host access is refused)."""
    _emulated(t, op, modes, True)


def launched_body(t: Any, op: TaskOp, modes: list[int]) -> None:
    """Body strategy for graph mode on the null backend: the work launched on the
    body's stream (``Backend.launch_callable``), which a capture records."""
    from .._interchange.views import stream_handle

    native = t._runtime.backend.native
    stream = native.stream_from_handle(stream_handle(_body_stream(t, op)))

    def kernel(*arrays: np.ndarray) -> None:
        task_body(np, arrays, modes, op.coef)

    native.launch_callable(stream, kernel, tuple(_task_views(t, op)), "a generated task")


def body_for(backend: str, recorded: bool) -> BodyRunner:
    """The body strategy for ``backend``, for tasks that may be recorded into graphs
    (graph mode, scopes) or not."""
    if backend == "cuda":
        return cupy_body
    if backend == "null":
        return launched_body if recorded else host_body
    return emulated_graph_body if recorded else emulated_body


def _body_stream(t: Any, op: TaskOp) -> Any:
    """The stream a body enqueues on: on a grid, that of member ``op.member``."""
    if isinstance(op.place_of_exec, tuple):
        return t.get_stream_at_index(op.member)
    return t.stream_ptr()


def _task_views(t: Any, op: TaskOp) -> list[Any]:
    """The body's views in dependency order (a bundle's fields flattened)."""
    if op.bundle is not None:
        return flatten_bundles(t.views())
    views = t.args_cai()
    return [] if views is None else list(views) if isinstance(views, tuple) else [views]


def flatten_bundles(values: Any) -> list[Any]:
    """``values`` with each bundle's named tuple replaced by its fields' values
    (fields without memory, ``None``, left out)."""
    from .._handles.bundles import is_view

    flat: list[Any] = []
    for value in values:
        if is_view(value):
            flat.extend(v for v in value if v is not None)
        else:
            flat.append(value)
    return flat


def _emulated(t: Any, op: TaskOp, modes: list[int], launched: bool) -> None:
    if (
        launched
        and op.bundle is not None
        and op.bundle.run
        and not isinstance(op.place_of_exec, tuple)
    ):
        t.run(lambda xp, *arrays: task_body(xp, flatten_bundles(arrays), modes, op.coef))
        return
    views = _task_views(t, op)
    if launched:
        from ..emulated import launch

        def kernel(*arrays: np.ndarray) -> None:
            task_body(np, arrays, modes, op.coef)

        launch(_body_stream(t, op), kernel, *views)
    else:
        task_body(np, [np.asarray(v) for v in views], modes, op.coef)


def cupy_body(t: Any, op: TaskOp, modes: list[int]) -> None:
    """Body strategy for the CUDA backend: CuPy kernels on the task stream.

    Device kernels reach every place an instance can be in (device memory, and pinned
    host or managed memory through unified addressing), so host tasks use CuPy too.
    """
    import cupy

    from ..interop.cupy import as_cupy, cupy_stream

    views = _task_views(t, op)
    with cupy_stream(_body_stream(t, op)):
        task_body(cupy, [as_cupy(v) for v in views], modes, op.coef)


def _host_fn(modes: list[int], coef: float) -> Callable[..., None]:
    def fn(*arrays: np.ndarray) -> None:
        task_body(np, flatten_bundles(arrays), modes, coef)

    return fn
