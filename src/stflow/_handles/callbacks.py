"""``ctx.host_launch``: a host function run in stream order on its dependencies.

The function gets host arrays of the dependencies' instances (read-only for
``read()``), then its extra arguments; a failure is noted with the launch's label and
raised at the next sync point. Acquisition and release are a task's
(``_handles.task``), without a body of the caller's: the callback is enqueued on the
task stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np

from .._core.access import READ
from .._core.errors import add_note, work_ids
from .._engine.runtime import Runtime
from ..backends._base import Allocation
from .bundles import Regrouping, bundle_dep, expand
from .logical_data import dep
from .task import _allocation, check_dep

__all__ = ["host_launch"]


def host_launch(runtime: Runtime, deps: tuple, fn: Any, args: Any, symbol: Any) -> None:
    """Run ``fn(*arrays, *args)`` on a host thread once ``deps`` are satisfied."""
    label = f"host_launch {symbol!r}" if symbol else "host_launch"
    if fn is None:
        raise TypeError(f"{label}: fn is required (host_launch(*deps, fn=callable))")
    if not callable(fn):
        raise TypeError(f"{label}: fn must be callable, got {type(fn).__name__}")
    if symbol is not None and not isinstance(symbol, str):
        raise TypeError(f"symbol must be a str, got {type(symbol).__name__}")
    layout: list[Any] | None = None
    for d in deps:
        if isinstance(d, bundle_dep):
            checked, layout, others = expand(
                deps, lambda one: check_dep(runtime, one, label), label, dep
            )
            if others:
                check_dep(runtime, others[0], label)  # raises TypeError
            break
    else:
        checked = [check_dep(runtime, d, label) for d in deps]
    if args is not None and not hasattr(args, "__iter__"):
        raise TypeError(
            f"{label}: args must be an iterable of extra arguments (a "
            f"tuple such as (value,)), got {type(args).__name__}"
        )
    extra = () if args is None else tuple(args)
    backend = runtime.backend
    with runtime.lock:
        runtime.check_submit(label)
        if runtime.data.retired:
            runtime.drain_retired()
        ident = next(work_ids)
        plan = runtime.acquire(
            checked, None, None, label, ident, "host_launch", host_only=True
        )
        stream = plan.stream
        assert stream is not None
        private = dict(zip(map(id, plan.reductions), plan.private or ()))
        arguments = [
            (
                _allocation(access)
                if access.instance is not None
                else cast(Allocation, private[id(access)].allocation),
                cast(tuple, d.ld._shape),
                cast(np.dtype, d.ld._dtype),
                d.mode == READ,
            )
            for d, access in zip(checked, plan.per_dependency)
            if access.instance is not None or id(access) in private
        ]
        if layout is not None:
            fn = Regrouping(
                fn,
                layout,
                [
                    access.instance is not None or id(access) in private
                    for access in plan.per_dependency
                ],
            )
        callback = _HostCallback(
            backend, fn, arguments, extra, label, ident, runtime.errors.capture
        )
        backend.launch_host_func(stream, callback)
        runtime.release(plan, stream, None, ident, plan.private)


class _HostCallback:
    """A ``host_launch`` callback: ``fn`` on host arrays of its arguments, a failure
    noted with the launch's label and reported at the next sync point.

    A class rather than a closure: the compiled build's
    closure environments lost their attributes under concurrent host callbacks."""

    __slots__ = ("backend", "fn", "arguments", "extra", "label", "ident", "capture")

    def __init__(
        self,
        backend: Any,
        fn: Any,
        arguments: list[Any],
        extra: tuple,
        label: str,
        ident: int,
        capture: Callable[..., Any],
    ) -> None:
        self.backend = backend
        self.fn = fn
        self.arguments = arguments
        self.extra = extra
        self.label = label
        self.ident = ident
        self.capture = capture

    def __call__(self) -> None:
        try:
            host_array = self.backend.host_array
            arrays = [
                host_array(allocation, shape, dtype, readonly)
                for allocation, shape, dtype, readonly in self.arguments
            ]
            self.fn(*arrays, *self.extra)
        except BaseException as exc:  # noqa: BLE001 - raised at the next sync point
            add_note(exc, f"raised by {self.label}")
            self.capture(exc, self.ident)
