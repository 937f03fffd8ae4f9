"""The mode of a runtime: stream mode here, graph mode in ``stflow._graph``.

A context chooses its runtime's mode once, when it is created. The runtime and the
modules around it (``_engine.endings``, ``_engine.reductions``, ``_engine.eviction``, ``_handles.task``,
``_engine.threads``, ``_engine.resources``) run the same code in both modes and call the mode at
the few points where the modes differ:

==================  ===============================================================
admission           before a plan is acquired: may the calling thread acquire it
                    now, and is the work recorded (:meth:`Mode.admit`)
streams             the pools of the calling thread's level, a stream free of
                    task bodies being captured (:meth:`Mode.pools`,
                    :meth:`Mode.free_stream`)
task start and end  :meth:`Mode.body_started`, :meth:`Mode.body_ended`,
                    :meth:`Mode.released`
copies              :meth:`Mode.recording`, :meth:`Mode.wrote`, :meth:`Mode.copy_device`
endings             :meth:`Mode.boundary`, :meth:`Mode.resume`, :meth:`Mode.quiesce`,
                    :meth:`Mode.check_finalize`, :meth:`Mode.close`,
                    :meth:`Mode.finalized`
reductions          :meth:`Mode.combines_at_once`, :meth:`Mode.root_level`,
                    :meth:`Mode.combining`
eviction            :meth:`Mode.held_states` (what the open graphs hold),
                    :meth:`Mode.touch`
==================  ===============================================================

:class:`Mode` is stream mode: every hook does nothing (or answers "not recorded").
On the path of every task (admission, streams, task start and end) the runtime tests
:attr:`Mode.graph` once and calls those hooks only in graph mode, so stream mode pays
an attribute test rather than a few calls per task; elsewhere it calls the hooks
unconditionally. Graph mode is ``stflow._graph.mode.GraphMode``, a subclass; no
stream-mode module imports it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .._compile import mypyc_attr

if TYPE_CHECKING:
    from .._core.coherence import DataState, Instance
    from .._core.plan import Plan
    from .._core.streams import StreamPools
    from ..backends._base import Backend, Event, Stream

__all__ = ["Mode"]


class _NoLevel:
    """The ``with`` form of "at the root level" when there is only the root."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


_NO_LEVEL = _NoLevel()


@mypyc_attr(allow_interpreted_subclasses=True)
class Mode:
    """Stream mode: the work runs in stream order as it is submitted.

    Attributes
    ----------
    graph : bool
        False here; True in graph mode (its work is recorded into graphs). False
        lets the runtime skip the per-task hooks (they would do nothing).
    context_name : str
        The public kind of context, for messages (``"context"``).
    """

    def __init__(self) -> None:
        self.graph = False
        self.context_name = "context"

    def backend(self, native: Backend) -> Backend:
        """The backend the runtime runs on, over the context's ``native`` one."""
        return native

    def attach(self, runtime: Any) -> None:
        """The runtime this mode serves is being built (its parts exist)."""

    def start(self) -> None:
        """The runtime is ready for work (its instruments are attached)."""

    def statistics(self) -> tuple[int, int]:
        """The graphs launched and instantiated so far."""
        return (0, 0)

    def share_graphs(self, shared: Any) -> None:
        """Use the graph cache of ``shared`` (an ``async_resources``; graph mode)."""

    # -- the hot path ---------------------------------------------------------------
    def admit(self, plan: Plan, what: Any) -> bool:
        """Wait (lock held) until the calling thread may acquire ``plan``; True when
        the work is recorded."""
        return False

    def readmit(self, plan: Plan, what: Any) -> None:
        """:meth:`admit` again after a wait, for work that is not recorded."""

    def pools(self) -> StreamPools | None:
        """The streams of the calling thread's level, ``None`` for the root's."""
        return None

    def free_stream(self, stream: Stream, pools: StreamPools, key: int) -> Stream:
        """``stream``, or another of ``pools`` at ``key`` when ``stream`` is
        capturing for task bodies in progress."""
        return stream

    def noted(self, plan: Plan) -> None:
        """``plan``, recorded, was decided (its stream is known)."""

    def body_started(self, stream: Stream) -> None:
        """A task body is about to enqueue work on ``stream``."""

    def body_ended(self, stream: Stream) -> None:
        """The task body on ``stream`` ended (before its end event)."""

    def released(self, plan: Plan) -> None:
        """``plan`` was released (lock held)."""

    # -- copies ---------------------------------------------------------------------
    def recording(self) -> bool:
        """True when the calling thread's work is recorded now."""
        return False

    def wrote(self, state: DataState, instance: Instance) -> None:
        """Recorded work wrote ``instance`` of ``state`` (only when recording)."""

    def copy_device(self) -> int | None:
        """The device internal copies must run on now, or ``None``: their own."""
        return None

    def retirement_allowed(self) -> bool:
        """True when collected data may be written back and freed now."""
        return True

    def pending_events(self) -> list[Event]:
        """Events of work this mode holds back (launched graphs) besides the pools'."""
        return []

    # -- endings --------------------------------------------------------------------
    def boundary(self, what: str) -> None:
        """A synchronisation point ``what`` begins (lock held)."""

    def resume(self) -> None:
        """The synchronisation point that :meth:`boundary` began has ended."""

    def quiesce(self) -> None:
        """``finalize()``: wait (lock held) for what other threads are recording."""

    def check_finalize(self) -> None:
        """Refuse ``finalize()`` when it would cut recorded work."""

    def close(self) -> None:
        """``finalize()``: run what was recorded (lock held)."""

    def finalized(self) -> None:
        """The runtime was torn down."""

    def discard(self) -> int:
        """An abandoned context: drop what the calling thread records; returns the
        number of user scopes dropped."""
        return 0

    # -- reductions and eviction ----------------------------------------------------
    def combines_at_once(self) -> bool:
        """True when partial results must be combined as soon as they are complete
        (recorded work may run many times)."""
        return False

    def root_level(self) -> Any:
        """A context manager: inside it, work is submitted at the root level."""
        return _NO_LEVEL

    def combining(self, state: DataState, device: int) -> None:
        """Recorded work combines the reductions of ``state``, reading the data at
        ``device`` (only when recording)."""

    def held_states(self) -> Iterable[DataState]:
        """The data that open recordings hold (eviction leaves it alone)."""
        return ()

    def touch(self, state: DataState) -> None:
        """``state`` is about to change outside any recording (an eviction)."""
