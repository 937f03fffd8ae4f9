"""Numba CUDA arrays and kernels for task arguments.

On the CUDA backend a task view becomes ``numba.cuda.from_cuda_array_interface(view,
owner=None, sync=False)``: zero-copy, and ``sync=False`` because the work is already
ordered on the task stream (synchronising would stall the pipeline or break graph
capture). Kernels launch on the task stream (``numba.cuda.external_stream``).

On the emulated backend the adapter works under Numba's CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1`` set before Numba is imported): views become simulator
arrays over the emulated memory and kernels run synchronously in the task body, after
the prerequisites. ``numba.cuda.external_stream(t.stream_ptr())`` is accepted there,
and the kernels of a task recorded into a graph are recorded and run with the graph
(:mod:`stflow.interop._numba_simulator`, installed once ``numba.cuda`` has been imported
and this module is imported or used). Without the simulator it raises
``BackendUnavailableError``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from .._core.errors import BackendUnavailableError
from .._dist.context import distributed_context
from .._dist.handles import dist_dep
from .._handles.context import context
from .._handles.logical_data import dep
from .._places.places import exec_place
from ._common import TaskScope, import_framework, recorded_into_a_graph, views_of

__all__ = [
    "get_arg_numba",
    "jit",
    "numba_arguments",
    "numba_task",
    "stf_kernel_decorator",
]


def _cuda() -> Any:
    """``numba.cuda``, or ``BackendUnavailableError`` naming the extra."""
    return import_framework("numba.cuda", "numba", "numba-cuda")


def _simulated() -> bool:
    from numba.core import config

    return bool(getattr(config, "ENABLE_CUDASIM", False))


def _install_simulator_support(cuda: Any) -> None:
    """Under the simulator, let ``external_stream`` take emulated task streams and
    record the kernels of recorded tasks (``_numba_simulator``)."""
    if _simulated():
        from ._numba_simulator import install

        install(cuda)


def _array(view: Any, task: Any) -> Any:
    """A zero-copy Numba device array of a task view."""
    cuda = _cuda()
    simulated = _simulated()
    if simulated:
        _install_simulator_support(cuda)
    if hasattr(view, "__cuda_array_interface__"):
        if simulated:
            raise BackendUnavailableError(
                "Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1) cannot use GPU memory "
                "of the CUDA backend; unset NUMBA_ENABLE_CUDASIM or use "
                "backend='emulated'"
            )
        return cuda.from_cuda_array_interface(
            view.__cuda_array_interface__, owner=None, sync=False
        )
    if not simulated:
        raise BackendUnavailableError(
            "on the emulated backend the Numba adapter needs Numba's CUDA simulator: set "
            "NUMBA_ENABLE_CUDASIM=1 before importing numba"
        )
    if recorded_into_a_graph(view):
        from ._numba_simulator import recorded_array

        return recorded_array(view, task)
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    return FakeCUDAArray(np.asarray(view))


def _stream(stream: Any) -> Any:
    """The task stream as Numba sees it (the simulator ignores streams)."""
    if _simulated():
        return 0
    return _cuda().external_stream(int(stream))


def get_arg_numba(task: Any, index: int) -> Any:
    """A Numba device array of dependency ``index`` of a started task."""
    return _array(task.get_arg_cai(index), task)


def numba_arguments(task: Any) -> Any:
    """Numba arrays of the non-token dependencies, like ``args_cai()``: ``None``, one
    array, or a tuple."""
    arrays = tuple(_array(view, task) for view in views_of(task))
    if not arrays:
        return None
    return arrays[0] if len(arrays) == 1 else arrays


class numba_task(TaskScope):
    """``with numba_task(ctx, *deps, symbol=None) as (arrays, stream):``.

    The task is created at the call and started on entry, which yields a tuple of
    Numba device arrays (empty without data dependencies) and the task's
    ``CudaStream``. A conversion failure ends the task and is raised. Exit ends the
    task; an ``end()`` error is raised only if the body succeeded.
    """

    def __init__(self, ctx: Any, *args: Any, symbol: str | None = None) -> None:
        super().__init__(ctx, args, symbol)

    def result(self) -> Any:
        arrays = tuple(_array(view, self.task) for view in views_of(self.task))
        return arrays, self.task.stream_ptr()


class _Launcher:
    """``kernel[grid, block, place, ctx]``: an immutable, configured launcher."""

    __slots__ = ("_kernel", "_grid", "_block", "_place", "_ctx")
    _kernel: stf_kernel_decorator
    _grid: Any
    _block: Any
    _place: exec_place | None
    _ctx: context | distributed_context | None

    def __init__(
        self,
        kernel: stf_kernel_decorator,
        grid: Any,
        block: Any,
        place: exec_place | None,
        ctx: context | distributed_context | None,
    ) -> None:
        object.__setattr__(self, "_kernel", kernel)
        object.__setattr__(self, "_grid", grid)
        object.__setattr__(self, "_block", block)
        object.__setattr__(self, "_place", place)
        object.__setattr__(self, "_ctx", ctx)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a configured kernel launcher is immutable")

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        if self._distributed(args) or isinstance(self._ctx, distributed_context):
            self._launch_distributed(args, kwargs)
            return
        deps = [arg for arg in args if isinstance(arg, dep)]
        ctx = self._ctx
        if ctx is None:
            if not deps:
                raise TypeError(
                    "No STF context could be inferred: a stflow Numba "
                    "kernel needs a dependency (ld.read(), ...) among its "
                    "arguments or a context in its configuration: "
                    "kernel[grid, block, place, ctx](...)"
                )
            ctx = deps[0].ld.borrow_ctx_handle()
        kernel = self._kernel._compiled()
        task_args: list[Any] = [] if self._place is None else [self._place]
        with ctx.task(*task_args, *deps) as t:
            arrays = iter([get_arg_numba(t, i) for i in range(len(deps))])
            call = [next(arrays) if isinstance(arg, dep) else arg for arg in args]
            kernel[self._grid, self._block, _stream(t.stream_ptr())](*call, **kwargs)

    @staticmethod
    def _distributed(args: tuple) -> bool:
        return any(isinstance(arg, dist_dep) for arg in args)

    def _launch_distributed(self, args: tuple, kwargs: dict[str, Any]) -> None:
        """A launch whose dependencies are a distributed context's data: a task of
        that context, the kernel launched on its executing rank only."""
        deps = [arg for arg in args if isinstance(arg, dist_dep)]
        ctx = self._ctx
        if ctx is None:
            ctx = deps[0][0].context
        if not isinstance(ctx, distributed_context):
            raise TypeError(
                "a kernel launch on a distributed context's data "
                "configured with a local context"
            )
        if any(isinstance(arg, dep) for arg in args):
            raise TypeError(
                "a kernel launch mixes a distributed context's data with "
                "a local context's"
            )
        with ctx.task(*deps, place=self._place) as t:
            if not t.runs_here:
                return  # the kernel runs on the executing rank
            kernel = self._kernel._compiled()
            arrays = iter([get_arg_numba(t, i) for i in range(len(deps))])
            call = [next(arrays) if isinstance(arg, dist_dep) else arg for arg in args]
            kernel[self._grid, self._block, _stream(t.stream_ptr())](*call, **kwargs)


class stf_kernel_decorator:
    """A Numba CUDA kernel whose launches are stflow tasks.

    ``kernel[grid, block]``, ``kernel[grid, block, exec_place]`` or ``kernel[grid,
    block, exec_place, ctx]`` gives a launcher; calling it with ``ld.read()`` /
    ``ld.rw()`` / ... among the arguments runs the kernel in a new task whose
    dependencies are those arguments, each replaced by its Numba array.

    Notes
    -----
    The kernel is compiled (``numba.cuda.jit``) at the first launch, then cached;
    launchers may be shared between threads (a concurrent first launch may compile
    twice, harmlessly). Without an explicit context, the first dependency's context
    is used.
    """

    def __init__(
        self,
        pyfunc: Callable[..., Any],
        jit_args: tuple = (),
        jit_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self._pyfunc = pyfunc
        self._jit_args = tuple(jit_args)
        self._jit_kwargs = dict(jit_kwargs or {})
        self._kernel: Any = None

    def _compiled(self) -> Any:
        kernel = self._kernel
        if kernel is None:
            kernel = self._kernel = _cuda().jit(*self._jit_args, **self._jit_kwargs)(
                self._pyfunc
            )
        return kernel

    def __getitem__(self, config: Any) -> _Launcher:
        if not isinstance(config, tuple) or not 2 <= len(config) <= 4:
            raise TypeError(
                "a kernel launch is configured as kernel[grid, block], "
                "kernel[grid, block, exec_place] or kernel[grid, block, "
                f"exec_place, ctx], got {config!r}"
            )
        place = config[2] if len(config) > 2 else None
        ctx = config[3] if len(config) > 3 else None
        if place is not None and not isinstance(place, exec_place):
            raise TypeError(
                f"the third launch configuration item must be an "
                f"exec_place or None, got {type(place).__name__}"
            )
        if ctx is not None and not isinstance(ctx, (context, distributed_context)):
            raise TypeError(
                f"the fourth launch configuration item must be a context "
                f"or None, got {type(ctx).__name__}"
            )
        return _Launcher(self, config[0], config[1], place, ctx)

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(
            f"kernel {getattr(self._pyfunc, '__name__', '?')!r} was "
            "called without a launch configuration; use "
            "kernel[grid, block](*args)"
        )

    def __repr__(self) -> str:
        return f"<stflow Numba kernel {getattr(self._pyfunc, '__name__', '?')!r}>"


def jit(*jit_args: Any, **jit_kwargs: Any) -> Any:
    """Decorate a Python function as a stflow Numba CUDA kernel.

    ``@jit`` bare, or ``@jit(...)`` with the arguments of ``numba.cuda.jit``; returns a
    :class:`stf_kernel_decorator`.
    """
    if (
        len(jit_args) == 1
        and not jit_kwargs
        and callable(jit_args[0])
        and not isinstance(jit_args[0], (str, list, tuple))
    ):
        return stf_kernel_decorator(jit_args[0])

    def decorate(pyfunc: Callable[..., Any]) -> stf_kernel_decorator:
        return stf_kernel_decorator(pyfunc, jit_args, jit_kwargs)

    return decorate


if "numba.cuda" in sys.modules:  # imported first, as the reference's tests do
    _install_simulator_support(sys.modules["numba.cuda"])
