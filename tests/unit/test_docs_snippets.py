"""Every code block of README.md and docs/*.md is marked, compiles, and (when it is a
plain ``python`` block) runs on the emulated backend.

The marker convention is in ``tests/helpers/docs_snippets.py`` and
``docs/writing-docs.md``. A reader copies one block: each runs in a fresh namespace
unless it is marked ``continues`` (and says so in its first line); the blocks of
README.md each run in a fresh process, those of a docs page in one process per page.
A timeout makes a snippet that hangs fail the test and name its line.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from helpers.docs_snippets import ROOT, SELF_CONTAINED, blocks, pages, run_page

PAGES = pages()


@pytest.mark.parametrize("path", PAGES, ids=[p.name for p in PAGES])
def test_every_block_is_marked_and_python_blocks_compile(path):
    for block in blocks(path):
        if block.language == "python":
            source = "\n" * (block.line - 1) + block.code
            compile(source, str(block.path), "exec")  # SyntaxError names the line


def _runnable(path):
    try:
        return any(b.runs_on_cpu for b in blocks(path))
    except ValueError:
        return True  # the test reports the unmarked block


RUNNABLE = [p for p in PAGES if _runnable(p)]


@pytest.mark.parametrize("path", RUNNABLE, ids=[p.name for p in RUNNABLE])
def test_python_blocks_run_on_the_emulated_backend(path):
    selected = [b for b in blocks(path) if b.runs_on_cpu]
    # README.md: every block in a fresh interpreter, as a reader copying one runs it.
    groups = [[b] for b in selected] if path.name in SELF_CONTAINED else [selected]
    ran, skipped = [], []
    for group in groups:
        outcome = run_page(
            path,
            group,
            timeout=90,
            env={
                "STFLOW_BACKEND": "emulated",
                # The README tells users without a GPU to set it for the Numba adapter.
                "NUMBA_ENABLE_CUDASIM": "1",
                "MPLBACKEND": "Agg",
            },
        )
        assert outcome.failure is None, f"{path.name}: {outcome.failure}"
        ran += outcome.ran
        skipped += outcome.skipped
    if skipped:
        pytest.skip(
            f"ran blocks at lines {ran}; skipped (missing optional module): {skipped}"
        )
    assert len(ran) == len(selected)


def test_the_marker_convention_refuses_unmarked_blocks(tmp_path, monkeypatch):
    import helpers.docs_snippets as snippets

    monkeypatch.setattr(snippets, "ROOT", tmp_path)
    page = tmp_path / "page.md"
    page.write_text("text\n\n```\nx = 1\n```\n")
    with pytest.raises(ValueError, match="without an info string"):
        blocks(page)
    page.write_text("```python gpus\nx = 1\n```\n")
    with pytest.raises(ValueError, match="unknown marker 'gpus'"):
        blocks(page)
    page.write_text(
        "```python gpu\nx = 1\n```\n```python needs=torch\ny = 2\n```\n"
        "```{toctree}\ntutorial\n```\n"
    )
    first, second = blocks(page)  # MyST directives are not code blocks
    assert (first.flags, first.line, second.needs) == ({"gpu"}, 2, ["torch"])
    assert not first.runs_on_cpu and first.runs_on_gpu and second.runs_on_cpu


def test_a_block_runs_alone_unless_it_says_it_continues(tmp_path, monkeypatch):
    import helpers.docs_snippets as snippets

    monkeypatch.setattr(snippets, "ROOT", tmp_path)
    page = tmp_path / "page.md"
    page.write_text("```python\nx = 1\n```\n\n```python\nprint(x + 1)\n```\n")
    outcome = run_page(page, blocks(page), timeout=30)
    assert outcome.ran == [2] and "NameError: name 'x' is not defined" in outcome.failure
    page.write_text(
        "```python\nx = 1\n```\n\n```python continues\n"
        "# continues the block above: x\nassert x == 1\n```\n"
    )
    outcome = run_page(page, blocks(page), timeout=30)
    assert outcome.failure is None and outcome.ran == [2, 6]
    # A block that builds on one skipped for a missing module is skipped too.
    page.write_text(
        "```python needs=no_such_module_stflow\nx = 1\n```\n\n"
        "```python continues\n# continues the block above: x\nx\n```\n"
    )
    outcome = run_page(page, blocks(page), timeout=30)
    assert outcome.failure is None and outcome.ran == []
    assert [s.split()[0] for s in outcome.skipped] == ["2", "6"]


def test_a_continuing_block_says_so_and_readme_blocks_never_continue(
    tmp_path, monkeypatch
):
    import helpers.docs_snippets as snippets

    monkeypatch.setattr(snippets, "ROOT", tmp_path)
    page = tmp_path / "page.md"
    page.write_text("```python\nx = 1\n```\n```python continues\nprint(x)\n```\n")
    with pytest.raises(ValueError, match="say so to the reader in its first line"):
        blocks(page)
    readme = tmp_path / "README.md"
    readme.write_text("```python continues\n# continues the block above\nx\n```\n")
    with pytest.raises(ValueError, match="make this one self-contained"):
        blocks(readme)
    assert SELF_CONTAINED == {"README.md"}


def test_a_failing_or_hanging_block_names_its_line(tmp_path, monkeypatch):
    import helpers.docs_snippets as snippets

    monkeypatch.setattr(snippets, "ROOT", tmp_path)
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nx = 1\n```\n\n```python continues\n"
        "# continues the block above\nassert x == 2\n```\n"
    )
    outcome = run_page(page, blocks(page), timeout=30)
    assert outcome.ran == [2]
    assert 'page.md", line 7' in outcome.failure and "AssertionError" in outcome.failure
    page.write_text("```python\nimport time\nwhile True: time.sleep(0.05)\n```\n")
    outcome = run_page(page, blocks(page), timeout=3)
    assert "timed out" in outcome.failure and "page.md:2" in outcome.failure


def test_ctrl_c_during_finalize_ends_the_program():
    # A graph-mode loop that never ends (the mistake the first graph-mode snippet used
    # to make): Ctrl-C must end the program, not block again in the at-exit finalizer.
    program = textwrap.dedent("""
        import numpy as np, stflow as stf
        sctx = stf.stackable_context(backend="emulated")
        n = sctx.logical_data(np.array([10], dtype=np.int64))
        with sctx.while_loop() as loop:
            with sctx.task(n.read()) as t:
                pass
            loop.continue_while(n > 0)
        print("finalizing", flush=True)
        sctx.finalize()
    """)
    env = dict(os.environ, STFLOW_BACKEND="emulated", PYTHONPATH=str(ROOT / "src"))
    with subprocess.Popen(
        [sys.executable, "-c", program],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "finalizing"
            time.sleep(0.5)
            child.send_signal(signal.SIGINT)
            _, stderr = child.communicate(timeout=15)
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()
    assert child.returncode != 0, stderr
    assert "KeyboardInterrupt" in stderr
    assert "finalize() was interrupted" in stderr
