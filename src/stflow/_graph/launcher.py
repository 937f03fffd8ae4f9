"""Graph mode's epochs instantiated and launched on a thread of their own.

Instantiating a graph (``cuGraphInstantiate``) costs about 4 µs per node on an H100,
as much as recording the node: paid on the submitting thread, at every
:data:`~stflow._graph.scopes.EPOCH_TASKS` tasks, it makes graph mode dearer than
stream mode. A :class:`Launcher` moves that work to a thread of its own while the
submitting thread records the next epoch, without changing what the rest of the
runtime sees:

- the submitting thread makes the launch stream wait on a *gate* (``Backend.gate_wait``:
  a counter on the device, ``cuStreamWaitValue32``) for the epoch's number ``k``,
  records the epoch's completion event after that wait, and hands the graph to the
  launcher's thread; the event exists at once, so everything that depends on the
  epoch (later epochs, host waits, write-backs) orders after it as before;
- the launcher's thread makes its own stream wait for the graph's prerequisites,
  instantiates the graph (or updates a cached executable of its topology), launches
  it on its stream and opens the gate to ``k`` behind it (``gate_open``). Epochs are
  launched in order, one thread, one stream; the gate only grows.

A failure on the launcher's thread (an instantiation refused) is reported to the
context's error log, raised at its next synchronisation point as failures of device
work are, and the gate is opened anyway, so nothing waits for ever. User scopes
(``graph_scope``, launchable graphs) and contexts on a caller's stream launch on the
submitting thread, where their errors are raised at once.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

from ..backends._base import Event, Stream
from . import launches
from .recorded import Graph

__all__ = ["Launcher"]


class Launcher:
    """Launches the epochs of one :class:`~stflow._graph.recording.GraphRecorder`
    from a thread of its own (see the module docstring)."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder
        self.jobs: queue.SimpleQueue[tuple[Graph, list[Event], int] | None] = (
            queue.SimpleQueue()
        )
        self.thread: threading.Thread | None = None
        self.stream: Stream | None = None
        self.gate: Any = None
        self.launched = 0  # epochs handed over, the gate's last value
        self.done = 0  # of which instantiated and launched (or failed)
        self.settled = threading.Condition()

    def launch(self, graph: Graph) -> Event:
        """Launch a closed epoch's graph (submitting thread); returns its completion
        event, recorded at once on the launch stream behind the epoch's gate."""
        recorder = self.recorder
        real = recorder.real
        stream = recorder.launch_stream()
        if self.thread is None:
            self._start(stream)
        if recorder.retiring:  # graphs that have run give their executables back
            launches.retire(recorder)
        self.launched += 1
        number = self.launched
        real.gate_wait(stream, self.gate, number)
        graph.launches += 1
        graph.done = real.record(stream)
        self.jobs.put((graph, list(graph.prereqs), number))
        recorder.release(graph)
        return graph.done

    def _start(self, stream: Stream) -> None:
        real = self.recorder.real
        self.gate = real.create_gate(stream.device)
        self.stream = real.create_stream(stream.device, self.recorder.error_sink)
        self.thread = threading.Thread(
            target=self._run, name="stflow-graph-launcher", daemon=True
        )
        self.thread.start()

    def _run(self) -> None:
        recorder = self.recorder
        real = recorder.real
        stream = self.stream
        assert stream is not None
        try:
            real.set_current_device(stream.device)  # the thread's driver context
        except BaseException as exc:  # noqa: BLE001 - reported; the jobs still run
            self._report(exc)
        while True:
            job = self.jobs.get()
            if job is None:
                return
            graph, prereqs, number = job
            try:
                executable = launches.executable(recorder, graph, retire=False)
                for event in prereqs:
                    real.wait(stream, event)
                recorder.graphs.launch(executable, stream)
            except BaseException as exc:  # noqa: BLE001 - reported, never lost
                self._report(exc)
            finally:
                try:
                    real.gate_open(stream, self.gate, number)
                except BaseException as exc:  # noqa: BLE001 - a device lost, say
                    self._report(exc)
                with self.settled:
                    self.done = number
                    self.settled.notify_all()

    def _report(self, exc: BaseException) -> None:
        """A failure on the thread: to the context's error log (raised at its next
        synchronisation point); the thread goes on, so no gate stays closed."""
        sink = self.recorder.error_sink
        if sink is not None:
            sink(exc)
            return
        import warnings

        warnings.warn(
            f"stflow: launching a graph failed: {exc!r}", RuntimeWarning, stacklevel=1
        )

    def settle(self) -> None:
        """Wait until the thread has launched every epoch handed to it (statistics
        then count their instantiations and updates)."""
        with self.settled:
            while self.done < self.launched:
                self.settled.wait()

    def close(self) -> None:
        """After the last epoch was handed over: stop the thread once it launched
        everything (its stream is destroyed once that work completed)."""
        thread = self.thread
        if thread is None:
            return
        self.jobs.put(None)
        thread.join()
        self.thread = None
        assert self.stream is not None
        self.recorder.real.destroy_stream(self.stream)
        self.stream = None

    def drop_gate(self) -> None:
        """Release the gate, once every completion event recorded behind it has
        completed (nothing waits on it any more)."""
        if self.gate is not None:
            self.recorder.real.destroy_gate(self.gate)
            self.gate = None
