"""A progress bar for long work: tasks submitted and completed, bytes moved.

``stf.ProgressBar(ctx)`` (or ``ctx.attach(stf.ProgressBar())``, or
``STFLOW_PROGRESS=1`` in the environment for every context) draws, from a helper
thread, a bar of the tasks completed out of the tasks submitted so far, with the bytes
copied between places. It uses ``tqdm`` when it is installed (a widget in Jupyter
through ``tqdm.auto``), else ``rich``, else one line of plain text (rewritten in place
on a terminal, a new line at most every few seconds elsewhere).

Completion is observed with one host function enqueued on the stream of each task and
host callback after its work (stream order: it runs when the work is complete). On
CUDA that is one ``cuLaunchHostFunc`` per task, a few microseconds: an instrument for
long work, not for measuring the runtime. Work recorded in a graph (graph mode, scopes)
counts as complete at ``finalize()`` (it shows as submitted until then).
"""

from __future__ import annotations

import math
import numbers
import sys
import threading
import time
from typing import IO, Any

from .seam import Instrument, WorkRecord, byte_size_text

__all__ = ["ProgressBar"]

_STYLES = ("auto", "tqdm", "rich", "text")


class ProgressBar(Instrument):
    """Show tasks submitted / completed and bytes moved while a context works.

    Parameters
    ----------
    ctx : context or stackable_context, optional
        Attach to it now (``stf.ProgressBar(ctx)``); otherwise pass the bar to
        ``ctx.attach``. A bar serves one context.
    style : {"auto", "tqdm", "rich", "text"}
        ``"auto"``: ``tqdm`` if it imports, else ``rich``, else ``"text"``.
    interval : float
        Seconds between redraws (the helper thread's period).
    file : file object, optional
        Where the text (and ``tqdm``) bar is written; default ``sys.stderr``.
    description : str
        The label in front of the bar.
    total : int, optional
        The number of tasks the program will submit, when known: the bar then shows
        the fraction of the whole run. By default the total is the number submitted
        so far (a sequential task flow does not know what comes next).

    Raises
    ------
    TypeError
        For an argument of the wrong type: a ``style`` or ``description`` that is not
        a string, an ``interval`` that is not a real number, a ``total`` that is not an
        integer (``True`` is not a count), a ``file`` without a ``write`` method.
    ValueError
        For an unknown ``style``, an ``interval`` that is not a finite positive
        number of seconds (at most ``threading.TIMEOUT_MAX``), or a negative ``total``.
    ImportError
        When ``style`` names a library that is not installed.

    Examples
    --------
    >>> import numpy as np, stflow as stf
    >>> with stf.context(backend="emulated") as ctx:      # doctest: +SKIP
    ...     stf.ProgressBar(ctx)
    ...     ...                                            # long work
    """

    def __init__(
        self,
        ctx: Any = None,
        *,
        style: str = "auto",
        interval: float = 0.1,
        file: IO[str] | None = None,
        description: str = "stflow",
        total: int | None = None,
    ) -> None:
        _check_arguments(style, interval, file, description, total)
        self.expected = None if total is None else int(total)
        self.style = _resolve_style(style)
        self.interval = float(interval)
        self.file = file
        self.description = description
        self.submitted = 0
        """Tasks and host callbacks submitted so far."""
        self.completed = 0
        """Those of them known to be complete."""
        self.bytes_moved = 0
        """Bytes of the copies enqueued so far (host <-> device, device <-> device)."""
        self.closed = False
        self._lock = threading.Lock()
        self._runtime: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar: Any = None
        self._last_text = 0.0
        self._text_width = 0
        if ctx is not None:
            ctx.attach(self)

    # -- the instrument -------------------------------------------------------------
    def attach(self, runtime: Any) -> None:
        if self._runtime is not None:
            raise ValueError(
                "this ProgressBar is attached to a context already; "
                "make one bar per context"
            )
        self._runtime = runtime
        self._thread = threading.Thread(
            target=self._run, name="stflow-progress", daemon=True
        )
        self._thread.start()

    def work_submitted(self, record: WorkRecord) -> None:
        if record.kind in ("task", "host_launch"):
            with self._lock:
                self.submitted += 1

    def transfer(
        self, record: WorkRecord, data: str, source: int, target: int, nbytes: int
    ) -> None:
        with self._lock:
            self.bytes_moved += nbytes

    def work_ending(self, record: WorkRecord) -> None:
        if record.kind not in ("task", "host_launch"):
            return
        stream = record.native_stream
        if stream.captures:
            return  # runs when its graph runs: counted at finalize()
        self._runtime.backend.launch_host_func(stream, self._one_done)

    def finalized(self) -> None:
        with self._lock:
            self.completed = self.submitted
        self.close()

    # -- counting and drawing -------------------------------------------------------
    def _one_done(self) -> None:
        with self._lock:
            self.completed += 1

    def _counts(self) -> tuple[int, int, int]:
        with self._lock:
            done, total, moved = self.completed, self.submitted, self.bytes_moved
        if self.expected is not None and not self.closed:
            total = max(total, self.expected)
        return done, total, moved

    def text(self) -> str:
        """The bar as one line of plain text."""
        done, total, moved = self._counts()
        width = 24
        filled = 0 if total == 0 else width * done // total
        percent = 0 if total == 0 else 100 * done // total
        return (
            f"{self.description}: [{'#' * filled}{'.' * (width - filled)}] "
            f"{done}/{total} tasks ({percent}%), {byte_size_text(moved)} moved"
        )

    def refresh(self) -> None:
        """Redraw now (the helper thread calls it every ``interval`` seconds)."""
        done, total, moved = self._counts()
        if self.style == "text":
            self._draw_text(final=False)
        elif self.style == "tqdm":
            bar = self._bar
            if bar is None:
                from tqdm.auto import tqdm

                bar = self._bar = tqdm(
                    total=total,
                    desc=self.description,
                    unit="task",
                    file=self.file,
                    leave=True,
                    dynamic_ncols=True,
                )
            bar.total = total
            bar.set_postfix_str(f"{byte_size_text(moved)} moved", refresh=False)
            if done > bar.n:
                bar.update(done - bar.n)  # keeps tqdm's rate and ETA right
            bar.refresh()
        else:
            if self._bar is None:
                from rich.progress import (
                    BarColumn,
                    MofNCompleteColumn,
                    Progress,
                    TextColumn,
                )

                progress = Progress(
                    TextColumn("{task.description}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TextColumn("tasks, {task.fields[moved]} moved"),
                )
                progress.start()
                self._bar = (
                    progress,
                    progress.add_task(self.description, total=total, moved="0 B"),
                )
            progress, task = self._bar
            progress.update(
                task, total=total, completed=done, moved=byte_size_text(moved)
            )

    def close(self) -> None:
        """Draw the final state and stop (``finalize()`` calls it)."""
        if self.closed:
            return
        self.closed = True
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        if self.style == "text":
            self._draw_text(final=True)
            return
        self.refresh()
        if self.style == "tqdm":
            self._bar.close()
        else:
            self._bar[0].stop()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.refresh()
            except Exception:  # noqa: BLE001 - a display problem must not stop work
                return

    def _draw_text(self, *, final: bool) -> None:
        out = self.file if self.file is not None else sys.stderr
        line = self.text()
        if _is_terminal(out):
            pad = " " * max(0, self._text_width - len(line))
            self._text_width = len(line)
            out.write("\r" + line + pad + ("\n" if final else ""))
        else:  # a log file or a pipe: no carriage returns
            now = time.monotonic()
            if not final and (
                now - self._last_text < max(2.0, self.interval) or self.submitted == 0
            ):
                return
            self._last_text = now
            out.write(line + "\n")
        out.flush()

    def __repr__(self) -> str:
        return f"<stflow.ProgressBar {self.style}: {self.text()}>"


def _check_arguments(
    style: Any, interval: Any, file: Any, description: Any, total: Any
) -> None:
    """Raise for an argument of ``ProgressBar`` that it cannot work with, naming it."""
    if not isinstance(style, str):
        raise TypeError(
            f"ProgressBar(style={style!r}): give a string, one of {', '.join(_STYLES)}"
        )
    if style not in _STYLES:
        raise ValueError(f"ProgressBar(style={style!r}): use one of {', '.join(_STYLES)}")
    if isinstance(interval, bool) or not isinstance(interval, numbers.Real):
        raise TypeError(
            f"ProgressBar(interval={interval!r}): give the seconds between "
            "redraws as a number, e.g. interval=0.1"
        )
    seconds = float(interval)
    if not (math.isfinite(seconds) and 0 < seconds <= threading.TIMEOUT_MAX):
        raise ValueError(
            f"ProgressBar(interval={interval!r}): give a positive, finite "
            "number of seconds between redraws (at most "
            f"{threading.TIMEOUT_MAX:g}), e.g. interval=0.1"
        )
    if file is not None and not callable(getattr(file, "write", None)):
        raise TypeError(
            f"ProgressBar(file={file!r}): give a text file object (with a "
            "write method), e.g. sys.stderr, or leave it out"
        )
    if not isinstance(description, str):
        raise TypeError(
            f"ProgressBar(description={description!r}): give the label as a string"
        )
    if total is not None:
        if isinstance(total, bool) or not isinstance(total, numbers.Integral):
            raise TypeError(
                f"ProgressBar(total={total!r}): give the expected number of "
                "tasks as an int >= 0, or leave it out"
            )
        if total < 0:
            raise ValueError(
                f"ProgressBar(total={total!r}): give the expected number "
                "of tasks, an int >= 0, or leave it out"
            )


def _is_terminal(out: Any) -> bool:
    if "ipykernel" in sys.modules and out in (sys.stderr, sys.stdout):
        return True  # Jupyter output honours carriage returns
    try:
        return bool(out.isatty())
    except (AttributeError, ValueError):
        return False


def _resolve_style(style: str) -> str:
    if style == "auto":
        for candidate in ("tqdm", "rich"):
            if _importable(candidate):
                return candidate
        return "text"
    if style != "text" and not _importable(style):
        raise ImportError(
            f"ProgressBar(style={style!r}) needs the {style} package: "
            f"pip install {style}, or use style='text'"
        )
    return style


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def progress_from_environment(value: str) -> ProgressBar | None:
    """The bar ``STFLOW_PROGRESS`` asks for: ``0``/empty none, ``1``/``auto`` the
    default style, or a style name."""
    value = value.strip().lower()
    if value in ("", "0", "off", "false", "no"):
        return None
    style = "auto" if value in ("1", "on", "true", "yes") else value
    if style not in _STYLES:
        raise ValueError(
            f"STFLOW_PROGRESS={value!r}: use 0, 1, or one of {', '.join(_STYLES)}"
        )
    return ProgressBar(style=style)
