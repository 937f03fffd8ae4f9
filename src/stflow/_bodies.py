"""Backend-neutral task bodies: ``task.run(fn)``.

``fn(xp, *arrays)`` receives the array module of the backend and one array per
dependency: NumPy arrays on the emulated backend, CuPy arrays on CUDA. The call is in
the task's stream order on both:

- on CUDA, ``fn`` runs at once with the task stream as CuPy's current stream (and the
  task's device current), so the CuPy kernels it launches are enqueued on it;
- on the emulated backend, ``fn`` is enqueued on the task stream
  (``stflow.emulated.launch``) and runs when the stream reaches it, which is also what
  a graph-mode body must do.

So one body serves both backends, in stream and graph mode::

    with ctx.task(x.rw(), y.read()) as t:
        t.run(lambda xp, x, y: x.__iadd__(2 * y))
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["run_body"]


def run_body(task: Any, fn: Callable[..., Any], indices: tuple[int, ...]) -> None:
    """``task.run(fn, *indices)`` (see the module docstring)."""
    if not callable(fn):
        raise TypeError(f"run expects a callable fn(xp, *arrays), got "
                        f"{type(fn).__name__}")
    if indices:
        views = [task.get_arg_cai(i) for i in indices]
    else:
        views = list(task.views())
    backend = task._runtime.backend
    if not backend.gpu_memory:
        import numpy as np

        from .emulated import launch
        launch(task.stream_ptr(), lambda *arrays: fn(np, *arrays), *views)
        return
    import cupy

    from .interop.cupy import as_cupy, cupy_stream
    with cupy_stream(task.stream_ptr()):
        fn(cupy, *[as_cupy(view) for view in views])
