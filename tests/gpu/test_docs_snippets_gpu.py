"""The ``python gpu`` code blocks of README.md and docs/*.md, run on the CUDA backend.

The marker convention is in ``tests/helpers/docs_snippets.py``; the CPU suite only
compiles these blocks (``tests/unit/test_docs_snippets.py``). Each page's GPU blocks
run in order in one fresh process.
"""

from __future__ import annotations

import pytest
from helpers.docs_snippets import blocks, pages, run_page

pytestmark = pytest.mark.gpu

GPU_PAGES = [
    p for p in pages() if any(b.runs_on_gpu and "gpu" in b.flags for b in blocks(p))
]


@pytest.mark.parametrize("path", GPU_PAGES, ids=[p.name for p in GPU_PAGES])
def test_gpu_blocks_run_on_cuda(path):
    selected = [b for b in blocks(path) if "gpu" in b.flags]
    outcome = run_page(path, selected, timeout=180, env={"STFLOW_BACKEND": "cuda"})
    assert outcome.failure is None, f"{path.name}: {outcome.failure}"
    if outcome.skipped:
        pytest.skip(f"skipped (missing module): {outcome.skipped}")
    assert len(outcome.ran) == len(selected)
