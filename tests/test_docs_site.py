"""The documentation site (mkdocs.yml, docs/) builds with `mkdocs build --strict`: a broken
link, a missing page or a page left out of the nav fails it; and its reference pages are
what the code generates now (`python -m tools.gen_docs`), never stale hand edits."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tools import gen_docs
from tools.processes import ROOT


def test_the_reference_pages_are_what_the_code_generates():
    assert gen_docs.stale_pages() == [], "run python -m tools.gen_docs"


def test_every_error_says_when_a_client_gets_it():
    page = gen_docs.errors_page()  # raises for an error class without a docstring
    assert "| `ModelNotFound` | 404 | NOT_FOUND |" in page


def test_the_site_builds_strictly(tmp_path):
    mkdocs = Path(sys.executable).parent / "mkdocs"
    done = subprocess.run([str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "errors" / "index.html").exists()
