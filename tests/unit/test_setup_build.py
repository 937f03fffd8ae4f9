"""setup.py compiles only in the steps that build extensions, and says so in one line.

pip runs setup.py once per build step; the metadata steps (``egg_info``,
``dist_info``) need no extension, and mypyc's analysis (most of the minute a
compiled install takes) used to run in each of them, silently. A stand-in ``mypyc``
records whether it was asked to compile, so these tests compile nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from helpers.docs_snippets import ROOT


@pytest.fixture
def fake_mypyc(tmp_path):
    package = tmp_path / "fake" / "mypyc"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "build.py").write_text(
        textwrap.dedent("""
        import os
        def mypycify(args, **options):
            with open(os.environ["FAKE_MYPYC_LOG"], "a") as log:
                log.write(" ".join(args) + "\\n")
            return []
    """)
    )
    log = tmp_path / "mypyc.log"
    env = {k: v for k, v in os.environ.items() if k != "STFLOW_PURE_PYTHON"}
    env.update(PYTHONPATH=str(tmp_path / "fake"), FAKE_MYPYC_LOG=str(log))
    return env, log


def _setup(env, *arguments):
    return subprocess.run(
        [sys.executable, "setup.py", *arguments],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_metadata_steps_do_not_compile(fake_mypyc, tmp_path):
    env, log = fake_mypyc
    done = _setup(env, "-q", "egg_info", "--egg-base", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert not log.exists()
    assert "stflow:" not in done.stderr  # no notice either


def test_a_build_says_in_one_line_that_it_compiles(fake_mypyc):
    env, log = fake_mypyc
    done = _setup(env, "build_ext", "--help")  # parses, builds nothing
    assert done.returncode == 0, done.stdout + done.stderr
    compiled = log.read_text().split()
    modules = [word for word in compiled if word.endswith(".py")]
    lines = [line for line in done.stderr.splitlines() if line.startswith("stflow:")]
    assert lines == [
        f"stflow: compiling {len(modules)} modules with mypyc (about a "
        "minute; STFLOW_PURE_PYTHON=1 installs the pure-Python build "
        "without compiling) ..."
    ]
    assert len(modules) >= 10


def test_the_pure_python_switch_says_so_once_and_compiles_nothing(fake_mypyc):
    env, log = fake_mypyc
    done = _setup(dict(env, STFLOW_PURE_PYTHON="1"), "build_ext", "--help")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not log.exists()
    assert [line for line in done.stderr.splitlines() if line.startswith("stflow:")] == [
        "stflow: installing the pure-Python build (STFLOW_PURE_PYTHON is set); it "
        "behaves the same, with about twice the runtime cost per task"
    ]
