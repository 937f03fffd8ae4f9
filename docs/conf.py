"""Sphinx configuration of the stflow documentation site.

Build it from the repository root (``pip install -e '.[docs]'``)::

    python -m sphinx -W --keep-going -c docs -b html . build/docs

The source directory is the repository root so that the Markdown pages keep the
relative links they have on GitHub (README.md -> docs/x.md -> ../benchmarks/...);
``include_patterns`` limits the site to README.md, docs/ and benchmarks/RESULTS.md.
Markdown is read by MyST; the API reference (docs/api.md) is generated from the
NumPy-style docstrings by autodoc and napoleon.
"""

from __future__ import annotations

import os
import sys

_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(_ROOT, "src"))
os.environ.setdefault("STFLOW_BACKEND", "emulated")  # no BackendNotice while importing
# Document the Python sources (the compiled build has the same docstrings, but the
# signatures of compiled functions are not introspectable).
os.environ.setdefault("STFLOW_PURE_PYTHON", "1")

project = "stflow"
author = "the stflow authors"
copyright = "the stflow authors"  # noqa: A001 - Sphinx's name

root_doc = "docs/index"
include_patterns = ["README.md", "docs/**", "benchmarks/RESULTS.md"]
exclude_patterns = ["build", ".venv", ".ci-venv", "docs/conf.py"]

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False}
napoleon_numpy_docstring = True
napoleon_google_docstring = False
napoleon_use_rtype = False
napoleon_use_ivar = True

html_theme = "alabaster"
html_title = "stflow"
html_static_path: list[str] = []
