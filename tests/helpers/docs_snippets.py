"""Run the code blocks of the Markdown documentation (README.md, docs/*.md).

The marker convention (stated in ``docs/writing-docs.md``) is the *info string*
of each fenced block, the words after the opening fence:

``python``
    Runs on the emulated backend, on a CPU-only machine, on its own: in a fresh
    namespace (a block of README.md: in a fresh process), so a reader can copy it
    alone. The blocks of one page run in order, in one process per page.
``python continues``
    Builds on the blocks above it on the same page (a docs page, never README.md):
    runs in their namespace. Its first line is a comment that says so to the reader
    (``# continues the block above: ...``).
``python gpu``
    Needs a CUDA device: runs in the GPU suite (``tests/gpu``); the CPU suite only
    compiles it.
``python fragment``
    Deliberately not runnable (a line of an API tour, a body without its setup): only
    compiled, never run.
``python needs=MODULE``
    Runs like ``python`` when ``MODULE`` imports, and is reported as skipped otherwise
    (the optional frameworks: ``torch``, ``numba.cuda``, ``warp``).
``bash``, ``console``, ``text``, ``dot`` (and ``toml``, ``yaml``, ``json``)
    Shell commands, program output, diagrams: not Python, never run.
``{directive}``
    A MyST directive of the documentation site (``{toctree}``, ``{eval-rst}``).

A block with no info string, or with an unknown one, is an error: every block says
what it is.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOT_PYTHON = frozenset({"bash", "console", "text", "dot", "toml", "yaml", "json"})
PYTHON_FLAGS = frozenset({"gpu", "fragment", "continues"})
SELF_CONTAINED = frozenset({"README.md"})  # pages whose blocks never continue

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)(?P<info>.*)$")


@dataclass
class Block:
    """One fenced code block of a Markdown page."""

    path: Path
    line: int  # 1-based line of the first line of code
    language: str
    flags: set[str] = field(default_factory=set)
    needs: list[str] = field(default_factory=list)
    code: str = ""

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def continues(self) -> bool:
        return "continues" in self.flags

    @property
    def runs_on_cpu(self) -> bool:
        return self.language == "python" and not self.flags - {"continues"}

    @property
    def runs_on_gpu(self) -> bool:
        return self.language == "python" and "fragment" not in self.flags


def pages() -> list[Path]:
    """README.md and every Markdown page of docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of ``path``; raises ``ValueError`` on an unmarked block."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        indent, fence = len(match["indent"]), match["fence"]
        words = match["info"].split()
        start = i + 1
        i += 1
        body: list[str] = []
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][indent:] if lines[i][:indent].isspace() else lines[i])
            i += 1
        i += 1
        where = f"{path.relative_to(ROOT)}:{start}"
        if not words:
            raise ValueError(
                f"{where}: a code block without an info string; mark it "
                "(```python, ```python fragment, ```text, ```bash ...)"
            )
        language, rest = words[0], words[1:]
        if language.startswith("{") and language.endswith("}"):
            continue  # a MyST directive ({toctree}, {eval-rst})
        block = Block(path, start + 1, language, code="\n".join(body) + "\n")
        if language == "python":
            for word in rest:
                if word in PYTHON_FLAGS:
                    block.flags.add(word)
                elif word.startswith("needs="):
                    block.needs.extend(filter(None, word[6:].split(",")))
                else:
                    raise ValueError(
                        f"{where}: unknown marker {word!r} on a python "
                        f"block; use one of {sorted(PYTHON_FLAGS)} or "
                        "needs=MODULE"
                    )
            if block.continues and not block.code.lstrip().startswith("#"):
                raise ValueError(
                    f"{where}: a 'continues' block builds on the blocks "
                    "above it; say so to the reader in its first line "
                    "(# continues the block above: ...)"
                )
            if block.continues and path.name in SELF_CONTAINED:
                raise ValueError(
                    f"{where}: the blocks of {path.name} are copied "
                    "alone; make this one self-contained (its imports "
                    "and data) instead of marking it 'continues'"
                )
        elif language not in NOT_PYTHON or rest:
            raise ValueError(
                f"{where}: unknown info string {match['info'].strip()!r}; "
                f"use python [gpu|fragment|needs=MODULE] or one of "
                f"{sorted(NOT_PYTHON)}"
            )
        found.append(block)
    return found


# -- the child process -----------------------------------------------------------------
_CHILD = r"""
import importlib, json, sys, traceback
path, selection = sys.argv[1], json.loads(sys.argv[2])
namespace = {}
skipped_chain = False
for line, code, needs, continues in selection:
    if not continues:                   # a block on its own: a fresh namespace
        namespace = {"__name__": "__docs__"}
        skipped_chain = False
    elif skipped_chain:                 # builds on a block that was skipped
        print("STFLOW-DOCS skipped", line, "needs the skipped block above", flush=True)
        continue
    missing = []
    for module in needs:
        try:
            importlib.import_module(module)
        except Exception as exc:
            missing.append(f"{module} ({type(exc).__name__})")
    if missing:
        print("STFLOW-DOCS skipped", line, "needs", ", ".join(missing), flush=True)
        skipped_chain = True
        continue
    print("STFLOW-DOCS start", line, flush=True)
    # Padding keeps the page's line numbers: tracebacks and inspect.getsource (Warp
    # kernels) read the Markdown file itself.
    source = "\n" * (line - 1) + code
    try:
        exec(compile(source, path, "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        print("STFLOW-DOCS failed", line, flush=True)
        sys.exit(1)
    print("STFLOW-DOCS ok", line, flush=True)
"""


@dataclass
class Outcome:
    ran: list[int]
    skipped: list[str]
    failure: str | None


def run_page(
    path: Path,
    selected: list[Block],
    *,
    timeout: float,
    env: dict[str, str] | None = None,
) -> Outcome:
    """Run ``selected`` blocks of ``path`` in order in one fresh process, each in a
    fresh namespace unless it ``continues`` the blocks before it."""
    child_env = dict(os.environ)
    child_env.update(env or {})
    child_env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT / "src"), child_env.get("PYTHONPATH", "")])
    )
    selection = json.dumps([(b.line, b.code, b.needs, b.continues) for b in selected])
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-W",
                "error::DeprecationWarning:stflow",
                "-c",
                _CHILD,
                str(path),
                selection,
            ],
            cwd=ROOT,
            env=child_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:

        def text(data: object) -> str:
            return data.decode() if isinstance(data, bytes) else str(data or "")

        output = text(exc.stdout) + text(exc.stderr)
        starts = re.findall(r"STFLOW-DOCS start (\d+)", output)
        last = f"{path.relative_to(ROOT)}:{starts[-1]}" if starts else "(none started)"
        return Outcome(
            [],
            [],
            f"timed out after {timeout} s in the block at {last}\n{output[-3000:]}",
        )
    ran = [int(n) for n in re.findall(r"STFLOW-DOCS ok (\d+)", output)]
    skipped = re.findall(r"STFLOW-DOCS skipped (\d+ needs .*)", output)
    failure = None
    if code != 0:
        failure = f"exit code {code}\n{output[-4000:]}"
    return Outcome(ran, skipped, failure)
