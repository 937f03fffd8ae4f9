"""Filling logical data with a value: ``init_logical_data``."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._core.errors import ContextMismatchError
from ._engine.runtime import RuntimeOwner
from ._handles.logical_data import logical_data
from ._handles.task import task
from ._places.places import data_place as data_place_type
from ._places.places import exec_place as exec_place_type

__all__ = ["init_logical_data"]


def fill_pattern(value: Any, dtype: np.dtype, what: str) -> bytes:
    """The bytes of ``value`` as one element of ``dtype``.

    Raises
    ------
    ValueError
        ``value`` cannot be cast to ``dtype`` under ``same_kind`` rules (an integral
        float such as ``0.0`` is accepted for integer types), or an integer does not
        fit the target integer type (it would wrap around).
    """
    try:
        if dtype.fields is not None:
            element = np.array(value, dtype=dtype)
        else:
            given = np.asarray(value)
            if given.dtype.kind == "c" and dtype.kind != "c":
                raise ValueError  # never same_kind; astype would only warn
            with np.errstate(invalid="ignore"):  # nan/inf into integers: rejected below
                element = given.astype(dtype)
            lossless = bool(element.astype(given.dtype) == given)
            if given.shape != () or not (
                np.can_cast(given.dtype, dtype, casting="same_kind") or lossless
            ):
                raise ValueError
            if dtype.kind in "iu" and given.dtype.kind in "iub":
                limits = np.iinfo(dtype)  # 1000 into int8 would wrap to -24
                if not limits.min <= int(given) <= limits.max:
                    raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise ValueError(
            f"{what}: fill value {value!r} cannot be stored as {dtype} "
            "without loss (same_kind casting)"
        ) from None
    return element.tobytes()


def check_fill_places(
    data_place: Any, exec_place: Any, what: str, data_name: str
) -> None:
    """``TypeError`` unless the places of a fill are places or ``None``."""
    if data_place is not None and not isinstance(data_place, data_place_type):
        raise TypeError(
            f"{what}: {data_name} must be a data_place or None, got "
            f"{type(data_place).__name__}"
        )
    if exec_place is not None and not isinstance(exec_place, exec_place_type):
        raise TypeError(
            f"{what}: exec_place must be an exec_place or None, got "
            f"{type(exec_place).__name__}"
        )


def init_logical_data(
    ctx: Any,
    ld: logical_data,
    value: Any,
    data_place: data_place_type | None = None,
    exec_place: exec_place_type | None = None,
) -> None:
    """Set every element of ``ld`` to ``value`` with one ``write()`` task.

    Notes
    -----
    The fill is ordered on the task stream; the host does not block.
    ``exec_place.host()`` fills host memory.
    """
    if not isinstance(ctx, RuntimeOwner):
        raise TypeError(f"init_logical_data expects a context, got {type(ctx).__name__}")
    if not isinstance(ld, logical_data) or ld._is_token:
        raise TypeError(
            f"init_logical_data expects a logical data with memory, got {ld!r}"
        )
    runtime = ctx._live()
    if ld._runtime is not runtime:
        raise ContextMismatchError(
            f"logical data {ld._label()} belongs to a different context"
        )
    check_fill_places(data_place, exec_place, "init_logical_data", "data_place")
    assert ld._dtype is not None  # data with memory has a dtype
    pattern = fill_pattern(value, ld._dtype, "init_logical_data")
    args: list[Any] = [ld.write(data_place)]
    if exec_place is not None:
        args.insert(0, exec_place)
    backend = runtime.backend
    nbytes = ld._state.nbytes
    runtime.check_submit("init_logical_data()")
    with task._make(runtime, tuple(args), f"fill({ld._symbol or ld._key})") as t:
        backend.fill(t.get_arg(0), nbytes, pattern, t._native_stream())
