"""Waiting for other host threads' work: held data, wait cycles, epoch boundaries.

Work a started task (or a launchable graph) accesses is *held* until it ends; another
thread's conflicting work waits for the release on the runtime's condition variable.
:func:`block` records who waits for whom (``blocked_on``) and refuses a wait that
would close a cycle of threads — each waiting for the next one's held data — with a
``ScopeError`` naming the data and its holder, instead of hanging.
:func:`wait_for_conflicts` is the common case (data held with a conflicting mode);
:func:`settle_epoch` lets a graph-mode sync point wait until no task is started, so
its epoch can close. Every function takes the runtime (``_runtime.Runtime``); the
lock is held.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Protocol

from .._core.access import WRITE
from .._core.errors import ContextFinalizedError, ScopeError

if TYPE_CHECKING:
    from .._core.coherence import DataState

__all__ = ["Owner", "block", "conflict", "settle_epoch", "wait_for_conflicts"]


class Owner(Protocol):
    """What waiting uses of the runtime (``_runtime.Runtime``)."""

    started: dict[Any, int]
    """Started work (tasks, launchable graphs) -> its thread."""
    blocked_on: dict[int, int]
    """Waiting thread -> the thread it waits for."""
    waiters: int
    cv: threading.Condition
    closing: bool
    finalized: bool
    boundaries: int
    """Graph-mode epoch boundaries waiting for started tasks."""

    def _await_no_started(self) -> None:
        """Wait until no work is started."""

    def wake(self) -> None:
        """Wake the waiting threads."""


def wait_for_conflicts(
    rt: Owner, accesses: list[tuple[DataState, int]], what: Any
) -> None:
    """Block while started work of another thread holds data that ``accesses``
    (state, mode) conflict with.

    Raises
    ------
    ScopeError
        The calling thread itself started the work it would wait for.
    """
    me = threading.get_ident()
    while True:
        found = conflict(rt, accesses)
        if found is None:
            return
        state, holder = found
        thread = None if holder is None else rt.started.get(holder)
        if thread == me:
            raise ScopeError(
                f"{what} accesses logical data {state.label}, which "
                f"{holder._label()} (started, not yet ended on this thread) also "
                "accesses with a conflicting mode; end that task first"
            )
        block(rt, thread, what, state, holder)


def conflict(
    rt: Owner, accesses: list[tuple[DataState, int]]
) -> tuple[DataState, Any] | None:
    """The first held data ``accesses`` conflict with, and the work holding it
    (``None``: readers, unknown which)."""
    for state, mode in accesses:
        if state.writing is not None:
            return state, state.writing
        if state.reading and mode & WRITE:
            for holder in rt.started:
                if holder._holds(state):
                    return state, holder
            return state, None
    return None


def block(
    rt: Owner,
    thread: int | None,
    what: Any,
    state: DataState | None = None,
    holder: Any = None,
) -> None:
    """Wait until held work is released; ``thread`` holds what the caller waits for
    (``None``: unknown or several).

    Raises
    ------
    ScopeError
        ``thread`` waits, directly or through others, for the calling thread:
        waiting would never end.
    ContextFinalizedError
        The context was finalized meanwhile.
    """
    me = threading.get_ident()
    if thread is not None:
        waiter: int | None = thread
        while waiter is not None:
            if waiter == me:
                data = "" if state is None else f" logical data {state.label}, held by"
                name = "" if holder is None else f" {holder._label()}"
                raise ScopeError(
                    f"{what} would wait forever for{data}{name}: the "
                    "thread holding it waits for this one; end tasks "
                    "and scopes before using data another thread "
                    "holds, or use data in the same order everywhere"
                )
            waiter = rt.blocked_on.get(waiter)
        rt.blocked_on[me] = thread
    rt.waiters += 1
    try:
        rt.cv.wait()
    finally:
        rt.waiters -= 1
        rt.blocked_on.pop(me, None)
    if rt.closing or rt.finalized:
        raise ContextFinalizedError(
            f"{what}: the context was finalized while this "
            "work waited for another thread's work"
        )


def settle_epoch(rt: Owner, what: str) -> None:
    """Graph mode's epochs: wait until no task is started, so the epoch can close.
    New work of threads with no task started waits meanwhile (the runtime's
    admission, ``GraphMode.admit``).

    Raises
    ------
    ScopeError
        The calling thread has a task started: the epoch would cut its work in two.
    """
    if not rt.started:
        return
    me = threading.get_ident()
    for holder, thread in rt.started.items():
        if thread == me:
            raise ScopeError(
                f"{what} while {holder._label()} is started but not "
                "ended on this thread: in graph mode the epoch closes "
                "here, and the task's work would be cut in two; end "
                "the task first"
            )
    rt.boundaries += 1
    try:
        rt._await_no_started()
    finally:
        rt.boundaries -= 1
        rt.wake()
