"""``stflow._stream_utils``: the reference's stream-resolution helper.

The reference resolves every stream argument through
``cuda.stf._experimental._stream_utils.get_stream_pointer``; code (and tests) that
import it keep working here. stflow resolves streams with one function everywhere
(``stflow._interchange.views.stream_handle``; docs/interop.md gives its rules), and this is its
reference-named entry point.
"""

from __future__ import annotations

from typing import Any

from ._interchange.views import stream_handle

__all__ = ["get_stream_pointer"]


def get_stream_pointer(stream: Any) -> int:
    """Resolve a stream argument to a raw ``CUstream`` handle (``0``: the null stream).

    Parameters
    ----------
    stream : None, int or object with ``__cuda_stream__``
        ``None`` gives ``0`` (the legacy default stream); an object whose type
        implements the ``__cuda_stream__`` protocol gives the handle it reports (the
        protocol is tried before ``int``, so it wins for ``int`` subclasses); a plain
        ``int`` is the handle itself.

    Returns
    -------
    int
        The raw handle.

    Raises
    ------
    TypeError
        ``__cuda_stream__`` fails, returns something other than ``(0, <int>, ...)``
        (another version, a non-``int`` handle, a malformed result), or ``stream`` is
        none of the accepted kinds. A ``bool`` is refused (the reference reads it as
        the handle ``0`` or ``1``).

    Notes
    -----
    Nothing is synchronised and nothing is kept alive: the caller must keep the stream
    object alive while the handle is in use.
    """
    return stream_handle(stream)
