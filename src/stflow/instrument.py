"""Instruments: see what the runtime did (task graphs, timelines, NVTX ranges).

Attach one to a context with ``ctx.attach(instrument)``, or set ``STFLOW_DOT_FILE`` /
``STFLOW_TRACE_FILE`` to have every context write its graph / timeline at
``finalize()``. ``ctx.statistics()`` needs no instrument.
"""

from ._instruments.dot import DotRecorder
from ._instruments.reduction import transitive_reduction
from ._instruments.seam import Instrument, Statistics, WorkRecord
from ._instruments.timeline import NvtxRanges, TraceRecorder

__all__ = [
    "DotRecorder",
    "Instrument",
    "NvtxRanges",
    "Statistics",
    "TraceRecorder",
    "WorkRecord",
    "transitive_reduction",
]
