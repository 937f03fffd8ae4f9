"""Instruments: seeing what the runtime did.

- ``seam``       the one instrumentation seam (``Instrument``) the runtime calls, its
                 counters and statistics
- ``reduction``  the transitive reduction of a task graph (pure)
- ``dot``        the instrument that draws the task graph (DOT)
- ``timeline``   the instruments that draw timelines: traces, NVTX ranges
- ``progress``   a progress bar of tasks submitted and completed, bytes moved

The runtime calls the seam; the recorders listen to it. Imports the foundation
(``_core.errors``, ``_core.config``) and, lazily, the recording backend's stream type.
"""
