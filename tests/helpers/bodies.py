"""Task bodies that work on every backend.

On the emulated backend the work is enqueued with ``stflow.emulated.launch``; on CUDA
it runs as CuPy kernels on the task stream (pinned host and managed memory are
device-accessible, so host-place tasks work too).
"""

from __future__ import annotations

import numpy as np


def _views(t):
    views = t.args_cai()
    if views is None:
        return []
    return list(views) if isinstance(views, tuple) else [views]


def arrays_of(t):
    """The task's views (``None``, one, or a tuple), as ``args_cai`` gives them."""
    return t.args_cai()


def _run(t, fn, *indices):
    views = [t.get_arg_cai(i) for i in indices]
    if t._runtime.backend.name == "emulated":
        from stflow.emulated import launch

        launch(t.stream_ptr(), lambda *arrays: fn(np, *arrays), *views)
        return
    import cupy

    from stflow.testing import cupy_array, cupy_stream

    with cupy_stream(t.stream_ptr()):
        fn(cupy, *[cupy_array(v) for v in views])


def fill_with(t, index, value):
    """Set every element of dependency ``index`` to ``value``."""
    _run(t, lambda xp, a: a.fill(value), index)


def add_to(t, dst, src, scale):
    """``dst += scale * src`` (``src=None``: ``dst += scale``)."""
    if src is None:
        _run(t, lambda xp, a: a.__iadd__(scale), dst)
    elif src == dst:
        _run(t, lambda xp, a: a.__iadd__(scale * a.copy()), dst)
    else:
        _run(t, lambda xp, a, b: a.__iadd__(scale * b), dst, src)
