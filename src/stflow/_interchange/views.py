"""Stream handles and array views handed to users: ``CudaStream`` and ``stf_cai``.

Task views on CUDA (:class:`TaskView`) advertise ``data: (ptr, False)`` for every
access mode, as the reference does, so that ``torch.as_tensor(view)`` accepts the views
of ``read()`` dependencies (the emulated backend then checks that they are not
written).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from .._core.errors import ScopeError

__all__ = [
    "CudaStream",
    "TaskView",
    "ViewLifetime",
    "ViewTuple",
    "stf_cai",
    "stream_handle",
]


class CudaStream(int):
    """A raw stream handle that also speaks ``__cuda_stream__``.

    Accepted as is by ``numba.cuda.external_stream``, ``torch.cuda.ExternalStream``,
    CuPy and any API that takes ``__cuda_stream__``.
    """

    __slots__ = ()

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, int(self))

    @property
    def ptr(self) -> int:
        return int(self)

    def __repr__(self) -> str:
        return f"CudaStream(0x{int(self):x})"


def stream_handle(stream: Any) -> int:
    """Resolve a stream argument to a raw handle.

    ``None`` is the legacy default stream (``0``); an object with ``__cuda_stream__``
    is asked for its handle (checked before ``int``); an ``int`` is the handle.

    Raises
    ------
    TypeError
        For any other object, or a ``__cuda_stream__`` that misbehaves.
    """
    if stream is None:
        return 0
    protocol = getattr(type(stream), "__cuda_stream__", None)
    if protocol is not None:
        try:
            result = stream.__cuda_stream__()
            version, handle = result[0], result[1]
        except Exception as exc:
            raise TypeError(f"{stream!r}.__cuda_stream__() failed: {exc}") from exc
        if version != 0 or isinstance(handle, bool) or not isinstance(handle, int):
            raise TypeError(
                f"{stream!r}.__cuda_stream__() returned {result!r}; "
                "expected (0, <int handle>)"
            )
        return handle
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise TypeError(
            f"a stream must be None, an int handle or an object with "
            f"__cuda_stream__, got {type(stream).__name__}"
        )
    return stream


def _not_a_tuple(view: object) -> TypeError:
    """The error for a view used as the tuple ``args_cai()`` gives for 2+ dependencies."""
    return TypeError(
        f"{type(view).__name__} is one view, not a tuple of views: task.args_cai() "
        "returns the bare view when the task has one dependency (and None for none); "
        "use task.views(), which always returns a tuple (`(x,) = t.views()`, "
        f"`f(*t.views())`), got {view!r}"
    )


class _OneView:
    """Makes iterating over a view or taking its ``len()`` a clear ``TypeError``.

    Without it, ``x, = t.args_cai()`` on a one-dependency task iterates through
    ``__getitem__`` (the interface dict's keys) and fails with ``KeyError: 0``.
    """

    __slots__ = ()

    def __iter__(self) -> Iterator[Any]:
        raise _not_a_tuple(self)

    def __len__(self) -> int:
        raise _not_a_tuple(self)

    def __bool__(self) -> bool:  # a view is true, as it was before __len__
        return True


class stf_cai(_OneView):
    """A plain view of device memory exposing the CUDA Array Interface v3.

    Parameters
    ----------
    ptr : int
        Device address.
    shape : tuple of int
    dtype : dtype-like
    stream : int, optional
        Stream the consumer must synchronise with; ``0`` means none is advertised.
    readonly : bool, optional
        Advertised in ``data[1]``.
    strides : tuple of int, optional
        Byte strides (stflow only; ``None``: C-contiguous), advertised in
        ``strides``: the view of a registered strided buffer.

    Notes
    -----
    The view borrows: the memory must outlive it. Task views advertise no stream,
    because their work is already ordered on the task stream. A view is one array,
    not a sequence: iterating over it or taking its ``len()`` raises ``TypeError``
    (a one-dependency ``args_cai()`` result used as a tuple; ``task.views()`` always
    returns one).
    """

    __slots__ = (
        "ptr",
        "shape",
        "dtype",
        "stream",
        "readonly",
        "strides",
        "__cuda_array_interface__",
    )

    def __init__(
        self,
        ptr: int,
        shape: tuple,
        dtype: Any,
        stream: int = 0,
        readonly: bool = False,
        strides: tuple | None = None,
    ) -> None:
        self.ptr = int(ptr)
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        self.stream = int(stream)
        self.readonly = bool(readonly)
        self.strides = None if strides is None else tuple(int(s) for s in strides)
        interface: dict[str, Any] = {
            "version": 3,
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, self.readonly),
            "strides": self.strides,
            "stream": self.stream or None,
        }
        if self.dtype.fields is not None:
            interface["descr"] = self.dtype.descr
        self.__cuda_array_interface__ = interface

    def __getitem__(self, key: str) -> Any:
        return self.__cuda_array_interface__[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.__cuda_array_interface__.get(key, default)

    def __repr__(self) -> str:
        return (
            f"stf_cai(ptr=0x{self.ptr:x}, shape={self.shape}, dtype={self.dtype}, "
            f"stream={self.stream}, readonly={self.readonly})"
        )


class ViewLifetime(_OneView):
    """What every task view shares: valid between the task's ``start()`` and
    ``end()`` (then every use raises :class:`ScopeError`), never pickled or deep-copied
    (it points at memory the runtime owns); ``copy.copy`` gives the view itself, which
    becomes invalid with it."""

    __slots__ = ()
    _invalid: str | None

    def _invalidate(self, why: str) -> None:
        object.__setattr__(self, "_invalid", why)  # a slot of the concrete view

    def _check(self) -> None:
        if self._invalid is not None:
            raise ScopeError(self._invalid)

    def _refuse_host_access(self, why: str) -> None:
        """Refuse host access from now on, saying ``why`` (the view of a task
        recorded into a graph). Views of device memory have no host access to
        refuse; views of host memory override this."""

    def _host_access_refused(self) -> bool:
        """True when host access was refused (:meth:`_refuse_host_access`)."""
        return False

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: Any) -> Any:
        raise TypeError(
            f"a task view cannot be copied deeply: it points at memory the "
            f"runtime owns; copy the data inside the task instead "
            f"(numpy.array(view), or a copy kernel), got {self!r}"
        )

    def __reduce__(self) -> Any:
        raise TypeError(
            f"a task view cannot be pickled: it points at memory the "
            f"runtime owns and is valid only inside its task, got {self!r}"
        )


_CAI = stf_cai.__dict__["__cuda_array_interface__"]  # the slot of stf_cai


class TaskView(stf_cai, ViewLifetime):
    """What a task body gets on CUDA: an :class:`stf_cai` valid until the task ends.

    Like the reference's, a task view advertises ``data: (ptr, False)`` whatever the
    access mode: PyTorch refuses read-only CUDA Array Interface objects,
    and ``torch.as_tensor(view)`` must work for ``read()`` dependencies too. Writing
    through the view of a ``read()`` dependency is still a bug; the emulated backend
    detects it at the end of the task (``AccessModeError``).

    Parameters
    ----------
    ptr, shape, dtype, stream
        As for :class:`stf_cai`.
    readonly : bool, optional
        Whether the dependency is ``read()``; kept as :attr:`read_only_access`, never
        advertised.
    """

    __slots__ = ("_invalid", "read_only_access")

    def __init__(
        self,
        ptr: int,
        shape: tuple,
        dtype: Any,
        stream: int = 0,
        readonly: bool = False,
        strides: tuple | None = None,
    ) -> None:
        self._invalid = None
        self.read_only_access = bool(readonly)
        super().__init__(ptr, shape, dtype, stream, False, strides)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        self._check()
        interface: dict[str, Any] = _CAI.__get__(self)
        return interface

    @__cuda_array_interface__.setter
    def __cuda_array_interface__(self, interface: dict[str, Any]) -> None:
        _CAI.__set__(self, interface)


def _not_an_array(views: tuple) -> TypeError:
    """The error for the tuple of ``t.views()`` handed to an array library whole."""
    return TypeError(
        f"this tuple of task views (t.views(), or t.args_cai() with two or more "
        f"dependencies) holds {len(views)} view(s), one per dependency, and is not an "
        "array: converting it would stack copies of the data, and writes to the copy "
        "would be lost; index it instead (`x, y = t.views()`, "
        "`numpy.asarray(t.views()[0])`), or call numpy.stack(...) for a deliberate copy"
    )


class ViewTuple(tuple):
    """What ``t.views()`` returns: a plain tuple of views that refuses to be converted
    to an array as a whole.

    NumPy, CuPy and PyTorch turn a sequence of array-likes into a new, stacked array:
    ``numpy.asarray(t.views())`` would be a copy whose writes are lost. Every array
    protocol of the tuple (``__array__``, ``__array_interface__``,
    ``__cuda_array_interface__``, ``__dlpack__``) therefore raises ``TypeError``
    saying to index it; the views themselves convert without copying.
    """

    __slots__ = ()

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        raise _not_an_array(self)

    @property
    def __array_interface__(self) -> Any:
        raise _not_an_array(self)

    @property
    def __cuda_array_interface__(self) -> Any:
        raise _not_an_array(self)

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        raise _not_an_array(self)

    def __dlpack_device__(self) -> Any:
        raise _not_an_array(self)
