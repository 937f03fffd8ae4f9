"""_compile.stale: a source newer than its compiled module makes Python use the sources,
where the build time of a module is the newer of its extension and mypyc's library."""

from __future__ import annotations

import os

from stflow._compile import COMPILED_MODULES, source, stale


def _touch(path, mtime):
    path.write_bytes(b"")
    os.utime(path, (mtime, mtime))


def _module(package, name):
    """The source of compiled module ``name`` under ``package``, its folder made."""
    python = source(package, name)
    python.parent.mkdir(parents=True, exist_ok=True)
    return python


def _extension(python):
    return python.with_name(f"{python.stem}.cpython-311-x86_64-linux-gnu.so")


def test_a_rebuilt_library_makes_unchanged_extensions_current(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    python = _module(package, COMPILED_MODULES[0])
    _touch(python, 1000.0)
    _touch(_extension(python), 900.0)  # older shim
    assert stale(package)  # no library: the source is newer
    _touch(tmp_path / "pkg__mypyc.cpython-311-x86_64-linux-gnu.so", 1001.0)
    assert not stale(package)  # rebuilt after the edit
    _touch(python, 1010.0)  # edited again since
    assert stale(package)


def test_installed_together_is_not_stale(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    for name in COMPILED_MODULES:
        python = _module(package, name)
        _touch(python, 1001.0)
        _touch(_extension(python), 1000.0)
    assert not stale(package)  # within 2 s
