"""Bundles: several logical data as one dependency and one task argument.

A :class:`bundle` (``ctx.bundle(vals=lv, colind=stf.constant(lc), ...)``) groups
existing logical data under field names; it owns no data and no tracking state.
``b.read()``, ``b.rw()``, ``b.write()`` and ``b.dep(**modes)`` make a
:class:`bundle_dep`, which a task expands into one ordinary dependency per acquired
field when it is built (``expand``), so the runtime, the plans and the ordering rules
never see bundles: a bundle of k fields costs what k dependencies cost, plus the
expansion. The task keeps a *layout*, one entry per argument the user passed (a
dependency index, or a :class:`Slot` for a bundle), so ``t.get(i)``, ``t.views()``,
``t.get_arg_cai(i)``, ``t.run``, host callbacks and kernel arguments count a bundle as
one slot and give it as a named tuple of its fields' views. Tasks without bundles
have no layout (``None``) and pay nothing.

Modes (as in CUDASTF's bundles): ``read()`` reads every field; ``rw()`` and
``write()`` apply to every field but *clamp* ``constant`` fields to read;
``dep(f=mode, ...)`` gives modes per field, unnamed fields read, ``AccessMode.NONE``
leaves a field out (its entry in the named tuple is ``None``), and asking more than
read of a ``constant`` field raises ``ValueError`` (an :class:`AccessModeError`).
``constant`` is a promise of this bundle's users only: the field stays ordinary
logical data that other dependencies may write.
"""

from __future__ import annotations

import collections
import keyword
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from .._core.access import READ, RW, WRITE, is_mode, mode_name
from .._core.errors import (
    AccessModeError,
    BundleFieldError,
    ContextFinalizedError,
    ContextMismatchError,
)
from .._core.reduce import REDUCE
from .logical_data import dep, logical_data

__all__ = [
    "Regrouping",
    "Slot",
    "append_argument",
    "bundle",
    "bundle_dep",
    "constant",
    "expand",
    "expand_arguments",
    "is_view",
]

View = TypeVar("View")


class constant:
    """Mark a bundle field read-only through the bundle: ``stf.constant(ld)``.

    ``rw()`` and ``write()`` of the bundle read the field; ``dep(f=...)`` asking more
    than read of it raises ``ValueError``.
    """

    __slots__ = ("ld",)
    ld: Any

    def __init__(self, ld: Any) -> None:
        if isinstance(ld, constant):
            ld = ld.ld
        self.ld = ld

    def __repr__(self) -> str:
        return f"constant({self.ld!r})"


class bundle(Generic[View]):
    """Named logical data used together as one dependency (``ctx.bundle(**fields)``).

    Fields stay ordinary logical data, reachable as attributes (``b.vals``); the
    bundle holds references only. ``ctx.bundle(ViewType, **fields)`` (optional, first
    and positional) names a ``typing.NamedTuple`` class with the same fields, in the
    same order: ``t.get(slot)`` then returns instances of it, which editors and type
    checkers know (``a: ViewType = t.get(0)``); else a ``collections.namedtuple``.

    Notes
    -----
    A bundle belongs to the context of its fields: using it once that context is
    finalized raises :class:`ContextFinalizedError`.
    """

    __slots__ = (
        "_names",
        "_fields",
        "_constant",
        "_view",
        "_alive",
        "_label",
        "_dep_of",
        "_runtime",
        "_made",
    )

    def __init__(
        self,
        fields: dict[str, Any],
        constant_names: frozenset[str],
        view: type,
        alive: Any,
        label: str,
        dep_of: Any,
    ) -> None:
        self._names = tuple(fields)
        self._fields = fields
        self._constant = constant_names
        self._view = view
        self._alive = alive  # (bundle, what): raises once the context is gone
        self._label = label
        self._dep_of = dep_of  # (field, mode, dplace) -> its dependency
        self._runtime: Any = None  # the fields' runtime (local contexts)
        self._made: dict[Any, bundle_dep] = {}  # dependencies at the affine place

    # -- the fields --------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        """The field names, in order."""
        return self._names

    @property
    def view_type(self) -> type[View]:
        """The named-tuple class of the bundle's slot in a task."""
        return self._view

    def is_constant(self, name: str) -> bool:
        """True when field ``name`` is read-only through this bundle."""
        self._check_name(name, "is_constant()")
        return name in self._constant

    def __getattr__(self, name: str) -> Any:
        fields = object.__getattribute__(self, "_fields")
        try:
            return fields[name]
        except KeyError:
            raise AttributeError(
                f"bundle has no field {name!r}; its fields are {', '.join(fields)}"
            ) from None

    def __len__(self) -> int:
        return len(self._names)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._fields.values())

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{name}=constant" if name in self._constant else name for name in self._names
        )
        return f"bundle({fields})"

    def __reduce__(self) -> Any:
        raise TypeError(
            "a bundle cannot be pickled: its logical data live in one "
            "context of one process"
        )

    # -- dependencies ------------------------------------------------------------
    def read(self, dplace: Any = None) -> bundle_dep:
        """Depend on every field with read access (at ``dplace``)."""
        return self._make({}, READ, dplace, "read()")

    def rw(self, dplace: Any = None) -> bundle_dep:
        """Depend on every field read-write; ``constant`` fields are read."""
        return self._make({}, RW, dplace, "rw()")

    def write(self, dplace: Any = None) -> bundle_dep:
        """Depend on every field write-only (previous values not fetched);
        ``constant`` fields are read (fetched)."""
        return self._make({}, WRITE, dplace, "write()")

    def dep(self, dplace: Any = None, **modes: Any) -> bundle_dep:
        """Per-field modes, ``b.dep(vals=AccessMode.RW, aux=AccessMode.NONE)``:
        unnamed fields read; ``AccessMode.NONE`` leaves a field out; a reduction
        mode (``AccessMode.REDUCE``, or the mode of ``ld.reduce(op)``) reduces.

        Raises
        ------
        KeyError
            A name that is not a field (:class:`BundleFieldError`).
        ValueError
            More than read asked of a ``constant`` field, or not an access mode
            (:class:`AccessModeError`).
        """
        checked: dict[str, int] = {}
        for name, mode in modes.items():
            self._check_name(name, "dep()")
            if (
                isinstance(mode, bool)
                or not isinstance(mode, int)
                or (int(mode) != 0 and not is_mode(int(mode)))
            ):
                raise AccessModeError(
                    f"{self!r}.dep({name}=...): {mode!r} is not an access mode; use "
                    "AccessMode.READ, WRITE, RW, REDUCE or NONE"
                )
            mode = int(mode)
            if name in self._constant and mode not in (0, READ):
                raise AccessModeError(
                    f"{self!r}.dep({name}={_mode_text(mode)}): field {name!r} is "
                    "constant in this bundle (read-only through it); read it, leave "
                    "it out with AccessMode.NONE, or depend on the field itself "
                    f"(bundle.{name}.rw())"
                )
            checked[name] = mode
        return self._make(checked, READ, dplace, "dep()")

    def _check_name(self, name: str, what: str) -> None:
        if name not in self._fields:
            raise BundleFieldError(
                f"{self!r}.{what}: no field {name!r}; the fields "
                f"are {', '.join(self._names)}"
            )

    def _make(
        self, modes: dict[str, int], default: int, dplace: Any, what: str
    ) -> bundle_dep:
        self._alive(self, what)
        key: Any = None
        if dplace is None:  # dependencies are values: made once
            key = (default, *modes.items()) if modes else default
            made = self._made.get(key)
            if made is not None:
                return made
        deps = []
        acquired = []
        for name in self._names:
            mode = modes.get(name, default)
            if name in self._constant and mode != 0:
                mode = READ
            if mode == 0:
                acquired.append(False)
                continue
            acquired.append(True)
            field = self._fields[name]
            deps.append(self._dep_of(field, mode, dplace))
        made = bundle_dep(self, tuple(deps), tuple(acquired))
        if key is not None:
            self._made[key] = made
        return made


class bundle_dep:
    """A dependency on a bundle: one task argument, one ordinary dependency per
    acquired field (``deps``, in field order; ``acquired`` flags each field)."""

    __slots__ = ("bundle", "deps", "acquired", "runtime", "reduces")

    def __init__(
        self, owner: bundle, deps: tuple[Any, ...], acquired: tuple[bool, ...]
    ) -> None:
        self.bundle = owner
        self.deps = deps
        self.acquired = acquired
        self.runtime: Any = owner._runtime  # every field's (checked when bundled)
        self.reduces = any(_dep_mode(d) & REDUCE for d in deps)

    @property
    def names(self) -> tuple[str, ...]:
        return self.bundle._names

    @property
    def modes(self) -> dict[str, int]:
        """Field name -> the access mode of each acquired field."""
        names = [n for n, got in zip(self.bundle._names, self.acquired) if got]
        return {name: _dep_mode(d) for name, d in zip(names, self.deps)}

    def with_deps(self, deps: list[Any]) -> bundle_dep:
        """The same bundle dependency over other per-field dependencies (the local
        dependencies of a distributed task)."""
        made = bundle_dep(self.bundle, tuple(deps), self.acquired)
        made.runtime = None  # local data of another context than ours
        return made

    def regroup(self, values: list[Any]) -> Any:
        """The bundle's named tuple of ``values`` (one per acquired field; ``None``
        for the others)."""
        out: list[Any] = []
        k = 0
        for got in self.acquired:
            if got:
                out.append(values[k])
                k += 1
            else:
                out.append(None)
        return self.bundle._view(*out)

    def __repr__(self) -> str:
        modes = ", ".join(
            f"{name}={_mode_text(mode)}" for name, mode in self.modes.items()
        )
        return f"bundle_dep({modes})"

    def __reduce__(self) -> Any:
        raise TypeError(
            "a bundle dependency cannot be pickled: its logical data live "
            "in one context of one process"
        )


def _dep_mode(d: Any) -> int:
    """The mode of a checked dependency: a :class:`dep`, or a distributed task's
    ``(data, mode, place)``."""
    return int(d.mode if isinstance(d, dep) else d[1])


def _mode_text(mode: int) -> str:
    if mode == 0:
        return "NONE"
    try:
        return mode_name(mode)
    except KeyError:
        return repr(mode)


class Slot:
    """A bundle argument of a task: its dependencies are ``start`` onwards."""

    __slots__ = ("start", "dep")

    def __init__(self, start: int, dep: bundle_dep) -> None:
        self.start = start
        self.dep = dep


def is_view(value: Any) -> bool:
    """True for a bundle slot's named tuple (task views are not tuples)."""
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def make_bundle(
    view: Any,
    fields: dict[str, Any],
    check: Any,
    alive: Any,
    label: str,
    dep_of: Any,
    key: Any = id,
) -> bundle[Any]:
    """A bundle of ``fields`` (``check(ld, name)`` refuses a foreign field; ``key``
    says when two fields are the same data)."""
    if not fields:
        raise ValueError(
            f"{label}: a bundle needs at least one field, ctx.bundle(name=ld, ...)"
        )
    lds: dict[str, Any] = {}
    constant_names = set()
    seen: dict[Any, str] = {}
    for name, value in fields.items():
        if name.startswith("_") or keyword.iskeyword(name) or name == "dplace":
            raise ValueError(
                f"{label}: {name!r} cannot name a bundle field (names are "
                "identifiers not starting with '_', and not 'dplace', "
                "which read()/rw()/write()/dep() take)"
            )
        if isinstance(value, constant):
            constant_names.add(name)
            value = value.ld
        check(value, name)
        same = seen.get(key(value))
        if same is not None:
            raise AccessModeError(
                f"{label}: fields {same!r} and {name!r} are the same logical data "
                f"{_data_label(value)}; a bundle holds each data once (give it one "
                "field)"
            )
        seen[key(value)] = name
        lds[name] = value
    names = tuple(lds)
    view_type: type
    if view is None:
        view_type = collections.namedtuple("bundle_view", names)  # type: ignore[misc,no-redef]
    else:
        if (
            not isinstance(view, type)
            or not issubclass(view, tuple)
            or not hasattr(view, "_fields")
        ):  # the named tuple protocol
            raise TypeError(
                f"{label}: the first argument, if any, is the view type: a "
                f"typing.NamedTuple class, got {view!r}"
            )
        declared = view._fields
        if tuple(declared) != names:
            raise ValueError(
                f"{label}: the view type {view.__name__} has fields "
                f"{tuple(declared)}, the bundle {names}; give the same "
                "names in the same order"
            )
        view_type = view
    return bundle(lds, frozenset(constant_names), view_type, alive, label, dep_of)


def state_key(ld: Any) -> int:
    """Fields are the same data when they share a state."""
    return id(ld._state)


def _data_label(ld: Any) -> str:
    """A field's data for messages: logical data, or a distributed context's data
    (``dist_data``, which has a ``name``); fields are checked before this."""
    return ld._label() if isinstance(ld, logical_data) else repr(ld.name)


def live_check(runtime: Any) -> Any:
    """The liveness check of a bundle of ``runtime``'s data."""

    def alive(owner: Any, what: str) -> None:
        if runtime.finalized:
            raise ContextFinalizedError(
                f"{owner!r}.{what}: the bundle's context is "
                "finalized; make bundles of data of a live "
                "context"
            )

    return alive


def local_field_check(runtime: Any, data_class: type, label: str) -> Any:
    """Refuse a field that is not logical data of ``runtime`` (``data_class``)."""

    def check(value: Any, name: str) -> None:
        ld: Any = value
        if not isinstance(value, data_class):
            raise TypeError(
                f"{label}: field {name!r} must be logical data of this "
                f"context ({data_class.__name__}), got {type(ld).__name__}"
                "; register arrays first (ctx.logical_data(array))"
            )
        if ld._runtime is not runtime:
            if ld._runtime.finalized:
                raise ContextFinalizedError(
                    f"{label}: field {name!r}, logical data "
                    f"{ld._label()}, belongs to a finalized "
                    "context"
                )
            raise ContextMismatchError(
                f"{label}: field {name!r}, logical data "
                f"{ld._label()}, belongs to a different "
                "context; bundle data of this context"
            )

    return check


def expand(
    args: tuple, check: Any, label: str, dependency: type
) -> tuple[list[Any], list[Any] | None, list[Any]]:
    """The dependencies of ``args`` with bundles expanded, the layout (``None``
    without bundles) and the other arguments (execution places), in order.

    ``dependency`` is the caller's class of ordinary dependencies (:class:`dep`, or
    ``dist_dep`` for a distributed task); ``check(d)`` checks one and returns it.
    """
    deps: list[Any] = []
    layout: list[Any] | None = None
    others: list[Any] = []
    for arg in args:
        if isinstance(arg, bundle_dep):
            if layout is None:
                layout = list(range(len(deps)))
            layout.append(Slot(len(deps), arg))
            for d in arg.deps:
                deps.append(check(d))
        elif isinstance(arg, dependency):
            if layout is not None:
                layout.append(len(deps))
            deps.append(check(arg))
        else:
            others.append(arg)
    if layout is not None:
        check_conflicts(deps, layout, label)
    return deps, layout, others


def _data_key(d: Any) -> Any:
    """What says that two checked dependencies (as :func:`_dep_mode`) use the same
    data: the logical data's state, or the distributed data."""
    return id(d.ld._state) if isinstance(d, dep) else id(d[0])


def check_conflicts(deps: list[Any], layout: list[Any], label: str) -> None:
    """Refuse a field of a bundle accessed beside the bundle (by another argument)
    with a mode that cannot merge with the field's: a reduction and any other access,
    or reductions with different operations. Reads and writes merge as for ordinary
    dependencies."""
    for d in deps:
        if _dep_mode(d) & REDUCE:
            break
    else:
        return  # without reductions every mode merges
    owner: list[Any] = [None] * len(deps)
    for entry in layout:
        if isinstance(entry, Slot):
            names = [
                n for n, got in zip(entry.dep.bundle._names, entry.dep.acquired) if got
            ]
            for k in range(len(entry.dep.deps)):
                owner[entry.start + k] = (entry.dep, names[k])
    for i in range(len(deps)):
        if owner[i] is None:
            continue
        for j in range(len(deps)):
            if j == i or _data_key(deps[j]) != _data_key(deps[i]):
                continue
            if owner[j] is not None and owner[j][0] is owner[i][0]:
                continue
            mode_i, mode_j = _dep_mode(deps[i]), _dep_mode(deps[j])
            if not (mode_i & REDUCE or mode_j & REDUCE):
                continue
            mine = (
                f"field {owner[i][1]!r} ({_mode_text(mode_i)}) of {owner[i][0].bundle!r}"
            )
            theirs = (
                f"field {owner[j][1]!r} ({_mode_text(mode_j)}) of {owner[j][0].bundle!r}"
                if owner[j] is not None
                else f"dependency {deps[j]!r}"
            )
            raise AccessModeError(
                f"{label}: {mine} and {theirs} access the same logical data with modes "
                "that do not merge (a task reduces into a data once and does nothing "
                "else with it); leave the field out of the bundle "
                f"(dep({owner[i][1]}=AccessMode.NONE)) or drop the other dependency"
            )


class Regrouping:
    """``fn`` called with one argument per task argument: a bundle's named tuple of
    its fields' arrays (``None`` for tokens) in place of its fields' arrays, for the
    host callbacks of ``host_launch`` on bundles (local and distributed).

    ``has_memory`` says, per expanded dependency, whether an array arrives for it;
    the values after those are extra arguments, passed on after the grouped ones,
    or dropped with ``extra=False`` (a distributed launch, whose tokens' local
    arrays come after its data's).
    A class rather than a closure: compiled callers' closure environments lost
    their attributes when the callback ran on another thread."""

    __slots__ = ("fn", "layout", "has_memory", "extra")

    def __init__(
        self, fn: Any, layout: list[Any], has_memory: list[bool], extra: bool = True
    ) -> None:
        self.fn = fn
        self.layout = layout
        self.has_memory = has_memory
        self.extra = extra

    def __call__(self, *values: Any) -> Any:
        has_memory = self.has_memory
        by_dependency: list[Any] = []
        k = 0
        for present in has_memory:
            if present:
                by_dependency.append(values[k])
                k += 1
            else:
                by_dependency.append(None)
        extra = values[k:] if self.extra else ()
        grouped: list[Any] = []
        for entry in self.layout:
            if isinstance(entry, Slot):
                grouped.append(
                    entry.dep.regroup(
                        by_dependency[entry.start : entry.start + len(entry.dep.deps)]
                    )
                )
            elif has_memory[entry]:
                grouped.append(by_dependency[entry])
        return self.fn(*grouped, *extra)


def expand_arguments(
    args: tuple,
    runtime: Any,
    check: Callable[[Any, Any, str], Any],
    label: str,
) -> tuple[list[Any], list[Any], list[Any]]:
    """A task's ``args`` with each bundle expanded into its fields' dependencies:
    ``(deps, layout, others)``, the layout mapping each argument to its dependency
    (an index) or its fields (a :class:`Slot`), ``others`` what is neither (the
    execution place). ``check(runtime, dep, label)`` checks a dependency made in
    another context; bundles that reduce are checked for conflicting fields."""
    deps: list[Any] = []
    layout: list[Any] = []
    others: list[Any] = []
    reduces = False
    for arg in args:
        if isinstance(arg, bundle_dep):
            layout.append(Slot(len(deps), arg))
            if arg.runtime is runtime:  # fields checked when bundled
                deps.extend(arg.deps)
            else:
                deps.extend(check(runtime, field, label) for field in arg.deps)
            reduces = reduces or arg.reduces
        elif isinstance(arg, dep):
            layout.append(len(deps))
            deps.append(arg if arg.ld._runtime is runtime else check(runtime, arg, label))
            reduces = reduces or bool(arg.mode & REDUCE)
        else:
            others.append(arg)
    if reduces:
        check_conflicts(deps, layout, label)
    return deps, layout, others


def append_argument(
    deps: list[Any],
    layout: list[Any],
    d: Any,
    runtime: Any,
    check: Callable[[Any, Any, str], Any],
    what: str,
) -> None:
    """Add the dependency or bundle ``d`` to a task's ``deps`` and ``layout`` (as
    :func:`expand_arguments` made them), each dependency checked by ``check``."""
    start = len(deps)
    if isinstance(d, bundle_dep):
        deps.extend(check(runtime, field, what) for field in d.deps)
        layout.append(Slot(start, d))
    else:
        deps.append(check(runtime, d, what))
        layout.append(start)
    check_conflicts(deps, layout, what)
