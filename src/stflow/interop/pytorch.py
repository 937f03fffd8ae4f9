"""PyTorch tensors for task arguments.

On the CUDA backend a tensor is ``torch.as_tensor`` of the task's CUDA Array
Interface view: zero-copy, on the device that holds the data. :class:`pytorch_task`
makes the task stream PyTorch's current stream (``torch.cuda.ExternalStream``), so the
operations of the body are ordered after the task's prerequisites and before its end.

On the emulated backend the tensors are CPU tensors sharing the emulated memory, and
PyTorch's current stream is left alone: the body runs after the prerequisites have
completed (the emulated backend waits on the host), and PyTorch's CPU operations run
synchronously. Inside a graph scope (``graph_scope``, ``while_loop``, ``repeat``,
``use_graph=True``) the body's PyTorch operations are recorded instead and replayed
each time the graph runs, as CUDA graph capture does on a GPU
(:mod:`stflow.interop._torch_capture`); only :class:`pytorch_task` can record, the
functions :func:`tensor_arg` and :func:`tensor_arguments` cannot.

Notes
-----
PyTorch has no read-only tensors, and refuses CUDA Array Interface views flagged
read-only; tensors of ``read()`` dependencies are therefore writable. Writing them is a
bug stflow cannot see: later tasks do not know the data changed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._core.errors import ScopeError
from .._interchange.views import stf_cai
from ..backends._base import pointer_array
from ._common import (
    TaskScope,
    gpu_memory,
    import_framework,
    recorded_into_a_graph,
    task_device,
    views_of,
)
from ._torch_capture import TorchCapture

__all__ = ["pytorch_task", "tensor_arg", "tensor_arguments"]


def _torch() -> Any:
    return import_framework("torch", "torch", "PyTorch")


def _tensor(torch: Any, view: Any) -> Any:
    """A zero-copy tensor of a task view (CUDA Array Interface or emulated)."""
    if hasattr(view, "__cuda_array_interface__"):
        if view.readonly:
            view = stf_cai(
                view.ptr, view.shape, view.dtype, 0, readonly=False, strides=view.strides
            )
        return torch.as_tensor(view)
    if recorded_into_a_graph(view):
        raise ScopeError(
            "tensor_arg/tensor_arguments on a task recorded into a graph (graph_scope, "
            "while_loop, repeat, use_graph=True) on the emulated backend: a tensor "
            "made now would be used once, while the graph is recorded. Write the body "
            "as 'with pytorch_task(ctx, *deps) as tensors:', which records its PyTorch "
            "operations and replays them each time the graph runs"
        )
    array = np.asarray(view)
    if not array.flags.writeable:
        array = pointer_array(
            view.ptr,
            tuple(array.shape),
            array.dtype,
            False,
            array,
            None if array.flags.c_contiguous else array.strides,
        )
    return torch.from_numpy(array)


def tensor_arg(task: Any, index: int) -> Any:
    """A zero-copy tensor of dependency ``index`` of a started task.

    Raises
    ------
    BackendUnavailableError
        PyTorch is not installed (``pip install 'stflow[torch]'``).
    ScopeError, IndexError, TypeError
        As ``task.get_arg_cai(index)``.
    """
    torch = _torch()
    return _tensor(torch, task.get_arg_cai(index))


def tensor_arguments(task: Any) -> Any:
    """Tensors of the task's non-token dependencies, like ``args_cai()``: ``None``,
    one tensor, or a tuple."""
    torch = _torch()
    tensors = tuple(_tensor(torch, view) for view in views_of(task))
    if not tensors:
        return None
    return tensors[0] if len(tensors) == 1 else tensors


class pytorch_task(TaskScope):
    """``with pytorch_task(ctx, *deps, symbol=None) as tensors:`` a task whose body
    uses PyTorch.

    Entering starts the task, makes its stream PyTorch's current stream (CUDA
    backend) and yields a tuple of tensors, one per non-token dependency (also for
    one; ``None`` without data dependencies).

    Notes
    -----
    If entering fails, the stream scope is left, the task ended and the original
    error raised. Exit leaves the stream scope, then ends the task; the body's
    exception wins over a stream-exit error, which wins over an ``end()`` error.
    """

    def __init__(self, ctx: Any, *args: Any, symbol: str | None = None) -> None:
        self._torch = _torch()
        self._capture: TorchCapture | None = None
        super().__init__(ctx, args, symbol)

    def open_scope(self, scope: Any) -> None:
        if not gpu_memory(self.task):
            views = views_of(self.task)
            if any(recorded_into_a_graph(view) for view in views):
                self._capture = TorchCapture(self._torch, self.task, views)
                scope.enter_context(self._capture)
            return
        torch = self._torch
        device = torch.device("cuda", task_device(self.task))
        stream = torch.cuda.ExternalStream(int(self.task.stream_ptr()), device=device)
        scope.enter_context(torch.cuda.stream(stream))

    def result(self) -> Any:
        if self._capture is not None:
            return self._capture.tensors or None
        tensors = tuple(_tensor(self._torch, view) for view in views_of(self.task))
        return tensors or None

    def _close(self, error: BaseException | None) -> None:
        capture = self._capture
        if capture is not None:
            capture.failed = error is not None  # a failed body records nothing
            self._capture = None
        super()._close(error)
