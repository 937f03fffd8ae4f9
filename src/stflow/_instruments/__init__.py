"""Instruments: seeing what the runtime did.

- ``seam``       the one instrumentation seam (``Instrument``) the runtime calls, its
                 counters and statistics
- ``recorders``  the instruments that ship: task graphs (DOT), timelines, NVTX ranges
- ``progress``   a progress bar of tasks submitted and completed, bytes moved

The runtime calls the seam; the recorders listen to it. Imports the foundation
(``_core.errors``, ``_core.config``) and, lazily, the recording backend's stream type.
"""
