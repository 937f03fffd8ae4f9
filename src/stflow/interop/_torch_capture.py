"""PyTorch operations recorded into an emulated graph: the CPU analog of stream capture.

On CUDA, the PyTorch operations of a ``pytorch_task`` body inside a graph scope
(``graph_scope``, ``while_loop``, ``repeat``, ``use_graph=True``) are captured from the
task stream into the graph, and run each time the graph runs. The emulated backend runs
PyTorch on the CPU, where nothing is captured: the body would run once, at recording
time, on memory whose value is not known yet. This module records instead.

While the body runs, a ``TorchDispatchMode`` sees every ATen operation. Each one is run
on *stand-ins* (zero-filled CPU tensors of the dependencies' shapes, so recording
neither reads nor writes the task's memory) and kept as a step: the operator, its
arguments with every tensor named by a *slot* (a dependency, or the output of an
earlier step), and the slots of its outputs. When the body ends the steps are enqueued
on the task stream (``stflow.emulated.launch``), so the graph replays them, in order,
on tensors over the task's memory each time it runs: in-place operations and writes
through views reach the data, as a captured CUDA graph's kernels do.

What CUDA graph capture refuses is refused here too, with :class:`ScopeError`: reading
a value on the host (``.item()``, ``float(t)``, ``if t:``, ``print(t)``). Writing a
tensor that is not a dependency and was made outside the body is refused as well
(recording would write it once; declare it as logical data). Tensors made outside the
body and only read are used as they are when the graph runs, as CUDA graphs use the
memory they captured. An operation that fails on the zero stand-ins (a Cholesky
factorisation) is recorded from its shapes alone (PyTorch's ``meta`` device).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._core.errors import ScopeError
from ..backends._base import pointer_array
from ._common import task_label

__all__ = ["TorchCapture"]


class _Slot:
    """A tensor of the program: dependency ``index`` or an earlier step's output."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class _Constant:
    """A tensor made outside the body, used as it is when the program runs."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor


_MODES: list[Any] = []


def _mode_class() -> Any:
    if not _MODES:
        from torch.utils._python_dispatch import TorchDispatchMode

        class Recorder(TorchDispatchMode):
            def __init__(self, capture: TorchCapture) -> None:
                super().__init__()
                self.capture = capture

            def __torch_dispatch__(
                self, func: Any, types: Any, args: Any = (), kwargs: Any = None
            ) -> Any:
                return self.capture.record(func, args, kwargs or {})

        _MODES.append(Recorder)
    return _MODES[0]


def _host_read(label: str, func: Any) -> ScopeError:
    return ScopeError(
        f"{label} is recorded into a graph and its PyTorch body reads a tensor's value "
        f"on the host ({func}: .item(), float(t), bool(t), if t:, print(t)); the body "
        "runs once, while the graph is recorded, so the value is not known yet (CUDA "
        "graph capture refuses this too). Keep the value in a tensor (torch.where, "
        "t.clamp, ...) or read it after the scope with ctx.wait(ld)"
    )


class TorchCapture:
    """Records the ATen operations of one ``pytorch_task`` body (see the module).

    Entering installs the recorder; :attr:`tensors` are the stand-ins the body gets.
    Exiting removes it and, unless :attr:`failed` was set, enqueues the program on
    the task stream.
    """

    def __init__(self, torch: Any, task: Any, views: tuple[Any, ...]) -> None:
        self.torch = torch
        self.task = task
        self.views = views
        self.label = task_label(task)
        self.tensors = tuple(
            torch.from_numpy(np.zeros(view.shape, view.dtype)) for view in views
        )
        self.slots: dict[int, int] = {id(t): i for i, t in enumerate(self.tensors)}
        self.alive: list[Any] = list(self.tensors)  # ids stay unique while recording
        self.steps: list[tuple[Any, list[Any], Any, list[int | None]]] = []
        self.failed = False
        self.mode = _mode_class()(self)

    def __enter__(self) -> TorchCapture:
        self.mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.mode.__exit__(*exc)
        steps, self.steps = tuple(self.steps), []
        count = len(self.alive)
        self.slots.clear()
        self.alive.clear()
        if self.failed or not steps:
            return
        from ..emulated import launch

        torch = self.torch

        def replay(*arrays: Any) -> None:
            _replay(torch, steps, count, arrays)

        replay.__qualname__ = "pytorch_task body"
        launch(self.task.stream_ptr(), replay, *self.views)

    # -- recording ------------------------------------------------------------------
    def _reference(self, leaf: Any) -> Any:
        if isinstance(leaf, self.torch.Tensor):
            slot = self.slots.get(id(leaf))
            return _Slot(slot) if slot is not None else _Constant(leaf)
        return leaf

    def record(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        from torch.utils._pytree import tree_flatten

        torch = self.torch
        if func is torch.ops.aten._local_scalar_dense.default:
            raise _host_read(self.label, func)
        for position, argument in enumerate(func._schema.arguments):
            alias = argument.alias_info
            if alias is None or not alias.is_write:
                continue
            value = args[position] if position < len(args) else kwargs.get(argument.name)
            if isinstance(value, torch.Tensor) and id(value) not in self.slots:
                raise ScopeError(
                    f"{self.label} is recorded into a graph and its PyTorch body writes "
                    f"a tensor made outside the body ({func}, argument "
                    f"{argument.name!r}); recording would write it once, not each time "
                    "the graph runs. Register it as logical data and give it to the "
                    "task as a dependency"
                )
        leaves, spec = tree_flatten((args, kwargs))
        references = [self._reference(leaf) for leaf in leaves]
        try:
            out = func(*args, **kwargs)
        except Exception:
            out = self._from_shapes(func, args, kwargs)
        outputs, _ = tree_flatten(out)
        slots: list[int | None] = []
        for leaf in outputs:
            if isinstance(leaf, torch.Tensor):
                slots.append(len(self.alive))
                self.slots[id(leaf)] = len(self.alive)
                self.alive.append(leaf)
            elif isinstance(leaf, (bool, int, float, complex)):
                raise _host_read(self.label, func)
            else:
                slots.append(None)
        self.steps.append((func, references, spec, slots))
        return out

    def _from_shapes(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """The outputs of an operation that failed on the stand-ins, from its shapes:
        run on the ``meta`` device, outputs that are inputs map back to them, others
        become zero tensors (used only while recording)."""
        from torch.utils._pytree import tree_map

        torch = self.torch
        back: dict[int, Any] = {}

        def to_meta(leaf: Any) -> Any:
            if isinstance(leaf, torch.Tensor):
                meta = leaf.to("meta")
                back[id(meta)] = leaf
                return meta
            return leaf

        meta_args, meta_kwargs = tree_map(to_meta, (args, kwargs))
        out = func(*meta_args, **meta_kwargs)

        def to_cpu(leaf: Any) -> Any:
            if isinstance(leaf, torch.Tensor):
                original = back.get(id(leaf))
                return (
                    original
                    if original is not None
                    else torch.zeros(leaf.shape, dtype=leaf.dtype)
                )
            return leaf

        return tree_map(to_cpu, out)


def _replay(torch: Any, steps: tuple, count: int, arrays: tuple) -> None:
    """Run a recorded program on tensors over the task's memory (``arrays``)."""
    from torch.utils._pytree import tree_flatten, tree_unflatten

    values: list[Any] = [None] * count
    for index, array in enumerate(arrays):
        if not array.flags.writeable:  # read() dependencies: PyTorch has no
            array = pointer_array(
                array.ctypes.data,
                tuple(array.shape),
                array.dtype,
                False,
                array,  # read-only tensors
                None if array.flags.c_contiguous else array.strides,
            )
        values[index] = torch.from_numpy(array)
    for func, references, spec, slots in steps:
        leaves = [
            values[ref.index]
            if isinstance(ref, _Slot)
            else ref.tensor
            if isinstance(ref, _Constant)
            else ref
            for ref in references
        ]
        args, kwargs = tree_unflatten(leaves, spec)
        outputs, _ = tree_flatten(func(*args, **kwargs))
        for slot, leaf in zip(slots, outputs):
            if slot is not None:
                values[slot] = leaf
