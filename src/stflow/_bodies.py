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
    from .interop.cupy import _CUPY, _load_cupy, body_array, body_stream
    cupy = _CUPY[0] if _CUPY else _load_cupy()
    with body_stream(int(task.stream_ptr())):
        try:
            fn(cupy, *[body_array(view) for view in views])
        except NotImplementedError as error:
            if "stream capture" not in str(error):
                raise
            raise NotImplementedError(
                f"{error}: CuPy refuses cuBLAS and cuSOLVER (matrix products, dot, "
                f"cupy.linalg) while a graph is recorded (graph mode, scopes, "
                f"task_graph); stflow.linalg (gemm, gemv, dot, syrk, trsm, potrf) "
                f"makes the same calls in a capturable way") from error
