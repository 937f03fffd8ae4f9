"""One scope of a graph-mode runtime, and the stack of them a thread records with.

A :class:`Scope` is what the runtime's :class:`~stflow._graph.scopes.ScopeTracker`
keeps of one open scope of a :class:`ScopeKind`: the recorder's graph it records
into, its streams, the snapshots that discarding it restores, and the instances a
repeated body assumes valid on entry or writes (see ``scopes.py``). A
:class:`Recording` is one stack of scopes and the streams it records with: shared by
every thread in graph mode's epochs, one per host thread in a stackable context.
:class:`ScopeOwner` is what the scopes use of the runtime that owns them.

Every task notes its accesses in the open scopes: this module is on the hot path and
compiled (``_compile.COMPILED_MODULES``).
"""

from __future__ import annotations

import enum
import threading
from typing import TYPE_CHECKING, Protocol

from .._core.coherence import DataState, Instance, Snapshot
from .._core.streams import StreamPools

if TYPE_CHECKING:
    from .._core.errors import ErrorLog
    from .._engine.registry import DataRegistry
    from ..backends._base import Event
    from .recorded import Graph, InlineScope

__all__ = ["Recording", "Scope", "ScopeKind", "ScopeOwner"]


class ScopeOwner(Protocol):
    """What a :class:`ScopeTracker` uses of the runtime that owns it."""

    errors: ErrorLog
    data: DataRegistry
    finalized: bool

    def wake(self) -> None:
        """Wake the threads waiting for held data (a scope released its data)."""

    def copy_into(
        self,
        state: DataState,
        target: Instance,
        source: Instance,
        prerequisites: list[Event],
        label: str,
        keep: bool = True,
        copy_title: str | None = None,
    ) -> Event:
        """An internal copy (hoisted imports, refreshes of assumed instances)."""


class ScopeKind(enum.Enum):
    """What a scope records."""

    EPOCH = "epoch"  # graph mode: the work between two sync points
    GRAPH = "graph"  # graph_scope() / push()
    WHILE = "while"  # while_loop()
    REPEAT = "repeat"  # repeat(count)
    LAUNCHABLE = "launchable"  # launchable_graph_scope(), pop_prologue_shared()


class Scope:
    """One open scope of a runtime.

    Attributes
    ----------
    kind : ScopeKind
    count : int or None
        How often a ``repeat`` body runs.
    graph : Graph
        The recorder's graph of this scope (a top-level graph, or a loop body; an
        inline scope's is its top-level graph).
    top : bool
        An outermost scope: it records a top-level graph with streams of its own.
    pools : StreamPools or None
        The streams of a top scope; ``None`` for nested ones (they use their top's).
    outer_pools : StreamPools or None
        What the runtime used before a top scope opened.
    hoist_pools : StreamPools or None
        Streams for imports hoisted out of a nested repeated scope.
    snapshots : dict or None
        ``id(state) -> (state, Snapshot)`` for a scope that can be discarded.
    touched : dict
        ``id(state) -> state``: the data a top scope's work touched.
    repeatable : bool
        Its recording may run many times (loops; top scopes that may become
        launchable).
    assumed : dict
        ``(id(state), device) -> state``: instances the body reads as valid on entry.
    fresh : set
        ``(id(state), device)``: instances written or copied into in the scope.
    condition_set : bool
        A while loop's condition was given (``continue_while``).
    closed : bool
    wrapper : Scope or None
        The graph scope opened to hold a root-level loop.
    work : int
        Tasks and host callbacks acquired in it.
    thread : int
        The host thread that opened it.
    inline : InlineScope or None
        A nested graph scope that no loop encloses: recorded into the top-level
        graph itself (it may hold host work), not as a loop node.
    locals : set
        ``id(state)`` of the data created in it with ``no_export=True``: it lives
        only in the scope and its value is not carried from one iteration of a
        loop to the next (no hoisted import, no refresh).
    lent : list
        ``(scope, place)``: places its work (or that of scopes closed in it) added
        to the ``fresh`` of an enclosing scope. Discarding it takes them back: work
        that never runs wrote nothing (else an enclosing loop would skip refreshing
        what it reads, or hoisting what it imports).
    """

    __slots__ = (
        "kind",
        "count",
        "graph",
        "top",
        "pools",
        "outer_pools",
        "hoist_pools",
        "snapshots",
        "touched",
        "repeatable",
        "assumed",
        "fresh",
        "condition_set",
        "closed",
        "wrapper",
        "work",
        "thread",
        "inline",
        "locals",
        "lent",
    )
    graph: Graph  # set when the scope is opened

    def __init__(
        self,
        kind: ScopeKind,
        repeatable: bool,
        discardable: bool,
        count: int | None = None,
    ) -> None:
        self.kind = kind
        self.count = count
        self.top = False
        self.pools: StreamPools | None = None
        self.outer_pools: StreamPools | None = None
        self.hoist_pools: StreamPools | None = None
        self.snapshots: dict[int, tuple[DataState, Snapshot]] | None = (
            {} if discardable else None
        )
        self.touched: dict[int, DataState] = {}
        self.repeatable = repeatable
        self.assumed: dict[tuple[int, int], DataState] = {}
        self.fresh: set[tuple[int, int]] = set()
        self.condition_set = False
        self.closed = False
        self.wrapper: Scope | None = None
        self.work = 0
        self.thread = threading.get_ident()
        self.inline: InlineScope | None = None
        self.locals: set[int] = set()
        self.lent: list[tuple[Scope, tuple[int, int]]] = []

    def held_data(self) -> list[DataState]:
        """The data a launchable graph holds: what its recording touched, read-only
        data aside (reading it again at every launch conflicts with nothing)."""
        return [state for state in self.touched.values() if not state.readonly]

    def _label(self) -> str:
        """How conflict messages name the scope holding the data."""
        return f"a {self.kind.value} scope of another thread, still open"

    def __repr__(self) -> str:
        return f"<Scope {self.kind.value}{' top' if self.top else ''}>"


class Recording:
    """One stack of scopes and the streams it records with: shared by every thread
    in graph mode's epochs, one per host thread in a stackable context.

    Attributes
    ----------
    stack : list of Scope
        The open scopes, outermost first.
    pools : StreamPools or None
        The streams work is given at this level (``None``: the runtime's own).
    bodies : int
        Task bodies of this recording in progress (no scope opens or closes then).
    """

    __slots__ = ("stack", "pools", "bodies")

    def __init__(self) -> None:
        self.stack: list[Scope] = []
        self.pools: StreamPools | None = None
        self.bodies = 0
