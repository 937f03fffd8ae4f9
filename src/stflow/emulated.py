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

from typing import Any, Callable

import numpy as np

from ._errors import ScopeError
from ._views import stream_handle
from .backends._base import callback_state

__all__ = ["launch", "set_conditional"]


def set_conditional(handle: int, value: Any) -> None:
    """Set the condition of a ``while_loop`` from launched work (``loop.cond_handle``):
    the emulated analog of ``cudaGraphSetConditional`` (non-zero: run the body again)."""
    from .backends._emulated_graphs import set_conditional as set_value
    set_value(handle, value)


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
    if callback_state.active:
        raise ScopeError("launch() called from work running in stream order; enqueue "
                         "from the task body instead")
    from .backends._base import pointer_array
    from .backends.emulated import EmulatedView, get_backend
    backend = get_backend()
    native = backend.stream_from_handle(handle)
    # Task views become arrays of their memory (also the views of a task recorded into
    # a graph, which refuse host access: the work reads them when the graph runs).
    for argument in args:
        if isinstance(argument, EmulatedView):
            argument._check()                     # a view of a task that has ended
    arguments = tuple(pointer_array(a.ptr, a.shape, a.dtype, a.readonly, a._allocation,
                                    a.strides)
                      if isinstance(a, EmulatedView) else a for a in args)
    from ._errors import add_note, work_ids
    from ._task import body_label
    order = next(work_ids)            # errors are reported in submission order
    owner = body_label(handle)
    source = (f"work launched from {owner}" if owner is not None
              else f"work launched on stream 0x{handle:x}")
    name = getattr(fn, "__qualname__", None)
    if isinstance(name, str) and "<lambda>" not in name:
        source += f", {name}()"

    def run() -> None:
        try:
            fn(*arguments)
        except BaseException as exc:  # noqa: BLE001 - raised at the next sync point
            sink = native.error_sink
            if sink is None:
                raise
            add_note(exc, f"raised by {source}")
            sink(exc, order)

    backend.enqueue_call(native, run)
