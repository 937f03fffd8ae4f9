"""Regenerate the figures README.md shows: print each block, ready to paste.

    python benchmarks/readme_figures.py [demo] [progress]      (default: both)

``demo``
    Runs ``python -m stflow.demo`` (its defaults: on a machine without a GPU, the
    emulated backend and the medium size) in a fresh process with
    ``OPENBLAS_NUM_THREADS=1`` (unless the environment sets it), so that the NumPy
    reference, whose 16 384-element dot products OpenBLAS would otherwise spread
    over threads that a busy machine keeps waiting, gives a steady figure; the demo's
    timing line says which threads it had. Prints the output as the README's
    ``text`` block, and the machine it ran on.
``progress``
    The progress bars of the README's "Progress and tiles" section: 800 tasks of
    about 4 ms, each moving a 512 KiB datum between the two emulated devices, drawn
    by ``stf.ProgressBar`` with tqdm (when installed) and as plain text; prints a
    line from about a fifth of the way and the final line of each.

The figures depend on the machine and on what else runs on it: regenerate them on a
quiet machine, and say in README.md which machine made them.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ("demo", "progress")


def _fence(lines: list[str]) -> str:
    return "\n".join(["```text", *lines, "```"])


def _machine() -> str:
    return (
        f"{platform.machine()}, {os.cpu_count()} core(s), Python "
        f"{platform.python_version()}, {platform.system()} {platform.release()}"
    )


def demo_figure(extra: list[str] | None = None) -> str:
    """The output of ``python -m stflow.demo`` (fresh process), as a text block."""
    env = dict(os.environ)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT / "src"), env.get("PYTHONPATH", "")])
    )
    command = [sys.executable, "-m", "stflow.demo", *(extra or [])]
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        raise SystemExit(
            f"the demo failed (exit code {done.returncode}):\n{done.stdout}{done.stderr}"
        )
    return _fence(done.stdout.rstrip("\n").splitlines())


def _progress_run(style: str) -> list[str]:
    import numpy as np

    import stflow as stf
    from stflow.emulated import launch

    tasks = 800
    log = io.StringIO()
    sampled: list[str] = []
    running = threading.Event()
    with stf.context(backend="emulated") as ctx:
        bar = stf.ProgressBar(ctx, style=style, file=log, total=tasks)
        if style == "text":
            # Into a file the text bar writes a line every 2 s only; a terminal sees
            # it redrawn in place, so sample what it would show.
            def sample() -> None:
                while not running.wait(0.01):
                    sampled.append(bar.text())

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
        datum = ctx.logical_data(np.zeros(64 * 1024))  # 512 KiB
        for k in range(tasks):
            with ctx.task(stf.exec_place.device(k % 2), datum.rw()) as t:
                launch(t.stream_ptr(), lambda a: time.sleep(0.004), *t.views())
    running.set()
    written = log.getvalue().replace("\r", "\n").splitlines()
    lines = [line.strip() for line in [*sampled[:-1], *written] if line.strip()]
    done = [_progress_count(line) for line in lines]

    def near(fraction: float) -> str:
        index = min(range(len(lines)), key=lambda i: abs(done[i] - fraction * tasks))
        return lines[index]

    return [near(0.2), lines[-1]]


def _progress_count(line: str) -> int:
    """The completed count of a bar line ("stflow:  17%|...| 137/800 ..." or
    "stflow: [###...] 227/800 tasks ...")."""
    for word in line.replace("|", " ").replace("]", " ").split():
        head, _, tail = word.partition("/")
        if head.isdigit() and tail.isdigit():
            return int(head)
    raise ValueError(f"no count in {line!r}")


def progress_figure() -> str:
    """The tqdm (when installed) and text bars of an 800-task run, as a text block."""
    import importlib.util

    blocks: list[str] = []
    styles = (["tqdm"] if importlib.util.find_spec("tqdm") else []) + ["text"]
    for style in styles:
        if blocks:
            blocks.append("")
        blocks.extend(_progress_run(style))
    return _fence(blocks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # No choices=: argparse (before 3.12) checks the empty list against them.
    parser.add_argument(
        "figures",
        nargs="*",
        metavar="demo|progress",
        help="the figures to make (default: all)",
    )
    args = parser.parse_args(argv)
    figures = args.figures or list(FIGURES)
    unknown = [name for name in figures if name not in FIGURES]
    if unknown:
        parser.error(f"unknown figure {unknown[0]!r}; choose from {', '.join(FIGURES)}")
    print(
        f"machine: {_machine()}; load average "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}\n"
    )
    for figure in figures:
        if figure == "demo":
            print("README.md, 'Run the demo' (python -m stflow.demo):")
            print(demo_figure())
        else:
            print("README.md, 'Progress and tiles' (800 tasks of about 4 ms):")
            print(progress_figure())
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
