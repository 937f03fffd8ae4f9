"""``task_graph()`` / ``TaskGraph``: record work once, launch it many times.

```python
g = stf.task_graph()
x = g.context.logical_data(x_host)      # declare data before recording
with g:                                 # record
    with g.context.task(x.rw()) as t: ...
for _ in range(100):
    g.launch()
g.finalize()                            # x_host holds the result
```
"""

from __future__ import annotations

from typing import Any

from .._core.errors import ScopeError
from .launchable import LaunchableGraph, _Launchable
from .scope import ScopeKind
from .stackable import stackable_context

__all__ = ["TaskGraph", "task_graph"]

_NEW, _RECORDING, _RECORDED, _FAILED, _RESET, _FINALIZED = range(6)
_STATE_NAMES = (
    "not yet recorded",
    "recording",
    "recorded",
    "failed",
    "reset",
    "finalized",
)
_ADVICE = {
    _NEW: "record it first with 'with graph: ...'",
    _RECORDING: "leave the 'with graph:' block first",
    _FAILED: "its recording raised; build a new task_graph()",
    _RESET: "it was reset; build a new task_graph()",
    _FINALIZED: "it was finalized; build a new task_graph()",
}
_RECORDING_ONLY = ("task", "host_launch", "graph_scope", "while_loop", "repeat")


class _GraphContext:
    """``TaskGraph.context``: the owned stackable context, with work allowed only
    while recording (``.raw`` is the context itself)."""

    def __init__(self, graph: TaskGraph) -> None:
        self._graph = graph
        self.raw = graph._sctx

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.raw, name)
        if name in _RECORDING_ONLY and self._graph._phase != _RECORDING:

            def refuse(*_: Any, **__: Any) -> Any:
                raise ScopeError(
                    f"TaskGraph.context.{name}() outside the 'with graph:' "
                    f"recording block (the graph is "
                    f"{_STATE_NAMES[self._graph._phase]})"
                )

            return refuse
        return attribute

    def finalize(self) -> None:
        self._graph.finalize()

    def __repr__(self) -> str:
        return f"<TaskGraph.context of {self.raw!r}>"


class TaskGraph:
    """Work recorded once (``with graph:``) and launched with :meth:`launch`.

    Parameters
    ----------
    backend : {"auto", "cuda", "emulated"}, optional
        The backend of the owned ``stackable_context`` (stflow-only).
    """

    def __init__(self, *, backend: str | None = None) -> None:
        self._sctx = stackable_context(backend=backend)
        self._phase = _NEW
        self._handle: LaunchableGraph | None = None
        self._scope: Any = None
        self.context = _GraphContext(self)

    def __enter__(self) -> None:
        if self._phase != _NEW:
            raise RuntimeError(
                f"a TaskGraph records once; this one is {_STATE_NAMES[self._phase]}"
            )
        self._scope = self._sctx._open(
            ScopeKind.LAUNCHABLE, root_only="task_graph recording"
        )
        self._phase = _RECORDING

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is not None:
            self._phase = _FAILED
            self._sctx._close(self._scope, failed=True)
            return
        state = _Launchable(self._sctx, self._scope)
        state.close_recording()
        self._handle = LaunchableGraph._of(state)
        self._phase = _RECORDED

    def _recorded(self, what: str) -> LaunchableGraph:
        if self._phase != _RECORDED or self._handle is None:
            raise RuntimeError(
                f"TaskGraph.{what}: the graph is "
                f"{_STATE_NAMES[self._phase]}; {_ADVICE[self._phase]}"
            )
        return self._handle

    def launch(self) -> None:
        """Run the recorded work once, asynchronously."""
        self._recorded("launch()").launch()

    @property
    def raw(self) -> LaunchableGraph:
        return self._recorded("raw")

    @property
    def graph(self) -> int:
        return self._recorded("graph").graph

    @property
    def exec_graph(self) -> int:
        return self._recorded("exec_graph").exec_graph

    @property
    def stream(self) -> int:
        return self._recorded("stream").stream

    def reset(self) -> None:
        """Release the recorded graph: its data gets its results (written back at
        :meth:`finalize`). No-op unless recorded."""
        if self._phase == _RECORDING:
            raise ScopeError("TaskGraph.reset() inside the 'with graph:' block")
        if self._phase == _RECORDED and self._handle is not None:
            handle, self._handle = self._handle, None
            self._phase = _RESET
            handle.reset()

    def finalize(self) -> None:
        """Reset if needed, then finalize the context: user buffers get the results."""
        if self._phase == _FINALIZED:
            return
        if self._phase == _RECORDING:
            raise ScopeError("TaskGraph.finalize() inside the 'with graph:' block")
        try:
            self.reset()
        finally:
            self._phase = _FINALIZED
            self._sctx.finalize()

    def __repr__(self) -> str:
        return f"TaskGraph({_STATE_NAMES[self._phase]})"


def task_graph(*, backend: str | None = None) -> TaskGraph:
    """A new :class:`TaskGraph` owning a new ``stackable_context``."""
    return TaskGraph(backend=backend)
