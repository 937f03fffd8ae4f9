"""Backend-neutral task bodies: ``task.run(fn)``.

``fn(xp, *arrays)`` receives the array module of the backend and one array per
dependency: NumPy arrays on the emulated backend, CuPy arrays on CUDA. The call is in
the task's stream order on both:

- on CUDA, ``fn`` runs at once with the task stream as CuPy's current stream (and the
  task's device current), so the CuPy kernels it launches are enqueued on it;
- on the emulated and null backends, ``fn`` is enqueued on the task stream
  (``Backend.launch_callable``, as ``stflow.emulated.launch`` does) and runs when the
  stream reaches it, which is also what a graph-mode body must do.

A bundle argument arrives as its named tuple of arrays (``None`` for fields left
out and tokens).

So one body serves both backends, in stream and graph mode::

    with ctx.task(x.rw(), y.read()) as t:
        t.run(lambda xp, x, y: x.__iadd__(2 * y))
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from .bundles import is_view

__all__ = ["open_bodies", "run_body"]


class _OpenBodies(threading.local):
    """Per thread: the tasks whose bodies it started and did not end, innermost last
    (``_handles.task``, which is compiled: a ``threading.local`` subclass must live in a
    Python module)."""

    def __init__(self) -> None:
        self.tasks: list[Any] = []


open_bodies = _OpenBodies()


def _flatten(views: list[Any]) -> tuple[list[Any], Callable[[Any], list[Any]]]:
    """The views with each bundle's named tuple replaced by its fields' views, and
    the function that puts the arrays made of them back into named tuples."""
    flat: list[Any] = []
    shapes: list[Any] = []  # per view: None, or (named tuple, fields)
    for view in views:
        if is_view(view):
            present = [field is not None for field in view]
            flat.extend(field for field in view if field is not None)
            shapes.append((type(view), present))
        else:
            flat.append(view)
            shapes.append(None)

    def rebuild(arrays: Any) -> list[Any]:
        out: list[Any] = []
        k = 0
        for shape in shapes:
            if shape is None:
                out.append(arrays[k])
                k += 1
                continue
            kind, present = shape
            fields = []
            for got in present:
                fields.append(arrays[k] if got else None)
                k += int(got)
            out.append(kind(*fields))
        return out

    return flat, rebuild


def run_body(task: Any, fn: Callable[..., Any], indices: tuple[int, ...]) -> None:
    """``task.run(fn, *indices)`` (see the module docstring)."""
    if not callable(fn):
        raise TypeError(
            f"run expects a callable fn(xp, *arrays), got {type(fn).__name__}"
        )
    backend = task._runtime.backend
    if task._layout is None:  # no bundles: arrays straight from the instances
        if backend.gpu_memory:
            _run_on_cuda(task, fn, indices)
        else:
            _run_in_stream_order(task, fn, indices)
        return
    if indices:
        views = [task.get_arg_cai(i) for i in indices]
    else:
        views = list(task.views())
    bundles = task._layout is not None and any(map(is_view, views))
    if not backend.gpu_memory:
        native = backend.native
        stream = native.stream_from_handle(int(task.stream_ptr()))
        source = f"work launched from {task._label()}"
        if bundles:
            flat, rebuild = _flatten(views)
            native.launch_callable(
                stream, lambda *arrays: fn(np, *rebuild(arrays)), tuple(flat), source
            )
            return
        native.launch_callable(
            stream, lambda *arrays: fn(np, *arrays), tuple(views), source
        )
        return
    from ..interop.cupy import _CUPY, _load_cupy, body_array, body_stream

    cupy = _CUPY[0] if _CUPY else _load_cupy()
    with body_stream(int(task.stream_ptr())):
        try:
            if bundles:
                flat, rebuild = _flatten(views)
                fn(cupy, *rebuild([body_array(view) for view in flat]))
            else:
                fn(cupy, *[body_array(view) for view in views])
        except NotImplementedError as error:
            _explain_capture(error)


def _run_in_stream_order(
    task: Any, fn: Callable[..., Any], indices: tuple[int, ...]
) -> None:
    """A body on a backend of host memory (emulated, null) of a task without
    bundles: enqueued on the task stream with NumPy arrays over the instances
    (read-only for ``read()``), so the host does not wait for the task's
    prerequisites."""
    native = task._runtime.backend.native
    host_array = native.host_array
    stream, instances = task._body_instances(indices)
    arrays = tuple(
        [
            host_array(allocation, shape, dtype, readonly)
            for allocation, shape, dtype, readonly in instances
        ]
    )
    body: Callable[..., Any] = functools.partial(fn, np)  # fn(xp, *arrays)
    guard = task._read_guard
    if guard is not None:  # the fingerprints of read() data around the body
        body = guard.around(body, task)
    native.launch_callable(stream, body, arrays, f"work launched from {task._label()}")


def _run_on_cuda(task: Any, fn: Callable[..., Any], indices: tuple[int, ...]) -> None:
    """A body on CUDA of a task without bundles: CuPy arrays straight from the
    instances (each an array made once per allocation and device), the task stream
    current."""
    cupy, allocation_array, body_stream = _CUDA[0] if _CUDA else _load_cuda()
    stream, instances = task._body_instances(indices)
    device = stream.ordinal  # the device whose context the stream is in
    arrays = [
        allocation_array(cupy, allocation, shape, dtype, device)
        for allocation, shape, dtype, _ in instances
    ]
    with body_stream(stream.handle):
        try:
            fn(cupy, *arrays)
        except NotImplementedError as error:
            _explain_capture(error)


_CUDA: list[tuple[Any, Callable[..., Any], Callable[[int], Any]]] = []
"""CuPy and the two helpers of :func:`_run_on_cuda`, once imported (an import
statement in every body costs more than the rest of an empty one)."""


def _load_cuda() -> tuple[Any, Callable[..., Any], Callable[[int], Any]]:
    from ..interop.cupy import _CUPY, _load_cupy, allocation_array, body_stream

    helpers = (_CUPY[0] if _CUPY else _load_cupy(), allocation_array, body_stream)
    _CUDA.append(helpers)
    return helpers


def _explain_capture(error: NotImplementedError) -> None:
    """Re-raise CuPy's refusal of a library call under capture with what to use."""
    if "stream capture" not in str(error):
        raise error
    raise NotImplementedError(
        f"{error}: CuPy refuses cuBLAS and cuSOLVER (matrix products, dot, cupy.linalg) "
        "while a graph is recorded (graph mode, scopes, task_graph); stflow.linalg "
        "(gemm, gemm_batched, gemv, dot, syrk, trsm, trmm, potrf, trtri, lauum) makes "
        "the same calls in a capturable way"
    ) from error
