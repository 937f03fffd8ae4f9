"""Device work on the emulated backend: the analog of a kernel launch.

``launch(stream, fn, *args)`` enqueues ``fn(*args)`` on a stream of the emulated
backend (for example ``t.stream_ptr()`` inside a task). It runs asynchronously, in
stream order, on the emulated device's thread; task views among ``args`` arrive as
NumPy arrays of the emulated device memory.

Notes
-----
An exception raised by ``fn`` is captured and raised by the owning context at its next
blocking synchronisation point (``wait``, ``finalize``, ``check_errors``; never
``fence``, which does not block), with a note naming the task it was launched from
("raised by work launched from task 'axpy'"). ``fn`` must not submit work to a context
or wait for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._handles.task import body_label
from ._interchange.views import stream_handle
from .backends import get_backend

__all__ = ["launch", "set_conditional"]


def set_conditional(handle: int, value: Any) -> None:
    """Set the condition of a ``while_loop`` from launched work (``loop.cond_handle``):
    the emulated analog of ``cudaGraphSetConditional`` (non-zero: run the body again)."""
    get_backend("emulated").set_loop_condition(handle, value)


def launch(stream: Any, fn: Callable[..., Any], *args: Any) -> None:
    """Enqueue ``fn(*args)`` on ``stream`` of the emulated backend.

    Parameters
    ----------
    stream : CudaStream or int
        A stream handle of the emulated backend, such as ``task.stream_ptr()``.
    fn : callable
        Runs on the emulated device thread when the stream reaches it.
    *args
        Passed to ``fn``; objects exposing ``__array_interface__`` (task views) are
        turned into NumPy arrays.

    Raises
    ------
    TypeError
        ``fn`` is not callable or ``stream`` is not a stream.
    ValueError
        ``stream`` is not a stream of the emulated backend.
    ScopeError
        Called from work that already runs in stream order.
    """
    if not callable(fn):
        raise TypeError(f"launch: fn must be callable, got {type(fn).__name__}")
    handle = stream_handle(stream)
    backend = get_backend("emulated")
    native = backend.stream_from_handle(handle)
    owner = body_label(handle)
    source = (
        f"work launched from {owner}"
        if owner is not None
        else f"work launched on stream 0x{handle:x}"
    )
    name = getattr(fn, "__qualname__", None)
    if isinstance(name, str) and "<lambda>" not in name:
        source += f", {name}()"
    backend.launch_callable(native, fn, args, source)
