"""Numba's CUDA simulator on the emulated backend: task streams and recorded tasks.

The reference's Numba programs launch kernels on ``numba.cuda.external_stream(
t.stream_ptr())``. Numba's simulator refuses every external stream (numba-cuda raises
"External streams are unsupported in the simulator"; the simulator built into Numba
has no ``external_stream`` at all), and it runs a kernel at once, on the host, which
inside a graph scope would be once, at recording time, on memory whose value is not
known yet.

:func:`install` (called when ``stflow.interop.numba`` is used under the simulator)
makes two additions to the simulator, and changes nothing it did before:

- ``numba.cuda.external_stream(handle)`` accepts the stream handles of stflow's
  emulated backend and returns a simulator stream (:class:`EmulatedStream`) that
  remembers the handle; any other handle still gets the simulator's own answer;
- a kernel called with :class:`RecordedArray` arguments (what the adapter gives for
  the views of a task recorded into a graph) is not run but enqueued on that task's
  stream (``stflow.emulated.launch``), with the launch configuration of the call, so
  the graph runs it each time it runs, on the task's memory. Other calls run at once,
  as before.
"""

from __future__ import annotations

import threading
from typing import Any

from .._core.errors import ScopeError
from ._common import task_label

__all__ = ["RecordedArray", "emulated_stream_handle", "install", "recorded_array"]

_LOCK = threading.Lock()  # the simulator keeps a kernel's configuration on it
_INSTALLED: dict[str, Any] = {}


def emulated_stream_handle(stream: Any) -> int | None:
    """The raw handle of ``stream`` when it is a (non-default) stream of the emulated
    backend, else ``None``."""
    from .._interchange.views import stream_handle

    try:
        handle = stream_handle(stream)
    except TypeError:
        return None
    if handle == 0:
        return None
    from ..backends import get_backend

    try:
        get_backend("emulated").stream_from_handle(handle)
    except ValueError:
        return None
    return handle


def install(cuda: Any) -> None:
    """Add the two behaviours of the module docstring to the simulator ``cuda``
    (idempotent)."""
    if _INSTALLED.get("cuda") is cuda:
        return
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    stream_class = _stream_class(cuda.stream)
    original_external = getattr(cuda, "external_stream", None)
    if not getattr(original_external, "_stflow", False):

        def external_stream(ptr: Any) -> Any:
            handle = emulated_stream_handle(ptr)
            if handle is not None:
                return stream_class(handle)
            if original_external is None:
                raise RuntimeError("External streams are unsupported in the simulator")
            return original_external(ptr)

        external_stream._stflow = True  # type: ignore[attr-defined]
        external_stream.__doc__ = (
            "numba.cuda.external_stream of the simulator, also "
            "accepting stflow's emulated stream handles"
        )
        cuda.external_stream = external_stream

    call = FakeCUDAKernel.__call__
    if not getattr(call, "_stflow", False):

        def __call__(self: Any, *args: Any) -> Any:
            recorded = [arg for arg in args if isinstance(arg, RecordedArray)]
            if not recorded or self._device:
                return call(self, *args)
            return _enqueue(self, call, FakeCUDAArray, args, recorded)

        __call__._stflow = True  # type: ignore[attr-defined]
        FakeCUDAKernel.__call__ = __call__  # type: ignore[method-assign]
    _INSTALLED["cuda"] = cuda
    _INSTALLED["stream"] = stream_class
    _INSTALLED["array"] = _array_class(FakeCUDAArray)


def _stream_class(base: type) -> type:
    """A subclass of the simulator's ``stream`` class that remembers a handle."""

    class EmulatedStream(base):
        """A simulator stream standing for a stream of stflow's emulated backend."""

        def __init__(self, handle: int) -> None:
            self.handle = handle

        def __cuda_stream__(self) -> tuple[int, int]:
            return (0, self.handle)

        def __int__(self) -> int:
            return self.handle

        def __repr__(self) -> str:
            return f"<simulated external stream 0x{self.handle:x} of stflow>"

    return EmulatedStream


class RecordedArray:
    """Stand-in base, replaced by a ``FakeCUDAArray`` subclass at :func:`install`."""


def _array_class(base: type) -> type:
    class Recorded(base, RecordedArray):
        """A simulator array of a task recorded into a graph: its shape and dtype are
        known, its data only when the graph runs (host access raises ScopeError)."""

        def __init__(self, view: Any, handle: int, label: str) -> None:
            self.view = view
            self.handle = handle
            self.label = label
            self.stream = 0

        @property
        def _ary(self) -> Any:
            raise ScopeError(
                f"an array of {self.label}, which is recorded into a graph, was read "
                "on the host; its data exists only when the graph runs. Pass it to a "
                "kernel (the launch is recorded and runs with the graph) or read the "
                "data after the scope with ctx.wait(ld)"
            )

        @property
        def shape(self) -> tuple[int, ...]:
            return tuple(self.view.shape)

        @property
        def ndim(self) -> int:
            return len(self.view.shape)

        @property
        def dtype(self) -> Any:
            return self.view.dtype

        @property
        def size(self) -> int:
            count = 1
            for extent in self.view.shape:
                count *= extent
            return count

        @property
        def nbytes(self) -> int:
            return self.size * self.view.dtype.itemsize

        alloc_size = nbytes

        def __repr__(self) -> str:
            return (
                f"<simulator array of {self.label} (recorded into a graph), "
                f"shape={self.shape}, dtype={self.dtype}>"
            )

    return Recorded


def recorded_array(view: Any, task: Any) -> Any:
    """The simulator array of ``view`` of ``task``, which is recorded into a graph."""
    label = task_label(task)
    return _INSTALLED["array"](view, int(task.stream_ptr()), label)


def _enqueue(kernel: Any, call: Any, array: type, args: tuple, recorded: list) -> None:
    """Enqueue ``kernel(*args)`` on the stream of its recorded arrays' task."""
    handles = {arg.handle for arg in recorded}
    if len(handles) != 1:
        raise ScopeError(
            "a kernel is called with arrays of several tasks recorded into "
            "graphs; launch it inside one task, with that task's arrays"
        )
    grid, block, shared = kernel.grid_dim, kernel.block_dim, kernel.dynshared_size
    positions = [i for i, arg in enumerate(args) if isinstance(arg, RecordedArray)]

    def run(*arrays: Any) -> None:
        values = list(args)
        for position, value in zip(positions, arrays):
            values[position] = array(value)
        with _LOCK:
            kernel.grid_dim, kernel.block_dim = grid, block
            kernel.dynshared_size = shared
            call(kernel, *values)

    run.__qualname__ = getattr(kernel, "__name__", "kernel")
    from ..emulated import launch

    launch(handles.pop(), run, *[args[i].view for i in positions])
