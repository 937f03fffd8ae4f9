"""Checking that every rank of a :mod:`distributed context <stflow._dist.context>`
makes the same collective calls.

Every rank must create the same data and submit the same tasks in the same order. A
rank that strays (a task under ``if rank == ...``, a loop whose count differs by rank)
leaves the ranks disagreeing about who holds which version of what: their messages
stop matching and the program hangs, or fails far from the cause. Two checks:

- always, at ``wait()``, ``fence()`` and ``finalize()`` (already collective): the
  ranks compare that call and how many collective calls each made before it (one
  small ``allgather``); a difference raises :class:`DivergentProgramError`;
- with ``STFLOW_DISTRIBUTED_CHECK=1``, at every collective call (data created, task,
  host callback), before any message of that call: the ranks compare what the call
  is, and the first difference raises, naming each rank's call. That is one
  ``allgather`` per task: a debugging aid for a program that hangs.

A *signature* is a tuple: ``("data", index, shape, dtype, owner)``, ``("task",
executing rank, ((data index, mode), ...))``, ``("wait", index)``, ``("fence",)``,
``("finalize",)``, followed by the number of collective calls before it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._core import config as _config
from .._core.access import mode_name
from .._core.errors import DivergentProgramError

__all__ = ["agree", "check_each_call", "describe"]


def check_each_call() -> bool:
    """``STFLOW_DISTRIBUTED_CHECK``: ``1`` compares every collective call across the
    ranks, ``0`` (default) only the synchronisation points."""
    return _config.distributed_check()


def describe(signature: tuple, name_of: Callable[[int], str]) -> str:
    """What a signature's call was, in words."""
    kind, count = signature[0], signature[-1]
    if kind == "data":
        _, index, shape, dtype, owner, _ = signature
        what = f"created data {name_of(index)} {shape} {dtype} owned by rank {owner}"
    elif kind == "task":
        _, rank, deps, _ = signature
        accesses = ", ".join(
            f"{mode_name(mode)} {name_of(index)}" for index, mode in deps
        )
        what = f"a task executing on rank {rank} ({accesses or 'no data'})"
    elif kind == "wait":
        what = f"wait({name_of(signature[1])})"
    else:
        what = f"{kind}()"
    return f"{what}, after {count} collective call(s)"


def agree(
    comm: Any, signature: tuple, name_of: Callable[[int], str], each_call: bool
) -> None:
    """Raise :class:`DivergentProgramError` on every rank unless every rank of
    ``comm`` makes the call ``signature`` (collective)."""
    signatures = comm.allgather(signature)
    if all(other == signature for other in signatures):
        return
    lines = "\n".join(
        f"  rank {rank}: {describe(other, name_of)}"
        for rank, other in enumerate(signatures)
    )
    hint = (
        ""
        if each_call
        else "\nSet STFLOW_DISTRIBUTED_CHECK=1 to stop at the first collective call "
        "that differs (one allgather per task)."
    )
    raise DivergentProgramError(
        f"the ranks' programs diverged: every rank must create the same data and "
        f'submit the same tasks, in the same order (docs/distributed.md, "What is '
        f'collective"); the ranks made these calls:\n{lines}{hint}'
    )
