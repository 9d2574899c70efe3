"""The documentation site (mkdocs.yml, docs/) builds with `mkdocs build --strict`: a broken
link, a missing page or a page left out of the nav fails it; its reference pages are what
the code generates now (`python -m tools.gen_docs`), never stale hand edits; and long names
in inline code break after `_`, `.` and `/` (tools/mkdocs_hooks.py, docs/stylesheets/extra.css),
never mid-word."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from tools import gen_docs
from tools.mkdocs_hooks import with_break_points
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
    metrics = (tmp_path / "site" / "reference" / "metrics" / "index.html").read_text()
    assert "<code>gateway_<wbr>batch_<wbr>cost</code>" in metrics and "stylesheets/extra.css" in metrics


def test_inline_code_breaks_after_underscores_dots_and_slashes_and_code_blocks_are_left_alone():
    page = ('<p><code>models[].batching.max_batch_cost</code> and <code>_s</code>, <code>a/b</code></p>'
            '<pre><span></span><code>serve --config /tmp/x_y.toml</code></pre><code>x_y</code>')
    assert with_break_points(page) == (
        '<p><code>models[].<wbr>batching.<wbr>max_<wbr>batch_<wbr>cost</code> and <code>_<wbr>s</code>, '
        '<code>a/<wbr>b</code></p><pre><span></span><code>serve --config /tmp/x_y.toml</code></pre>'
        '<code>x_<wbr>y</code>')


def listed_pages() -> set[str]:
    """The nav's pages a reader finds from the README's and the home page's lists: each
    section's pages, a nested group by its first page (its overview, which links the rest);
    the benchmark result pages are there as "one page per run", the home page is the list."""
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    pages: set[str] = set()
    for section in nav:
        [(_, entries)] = section.items()
        for entry in entries if isinstance(entries, list) else []:
            [(_, target)] = entry.items()
            first = target if isinstance(target, str) else next(iter(target[0].values()))
            pages.add(first)
    return {page for page in pages if not page.startswith("bench/")}


def test_the_readme_and_the_home_page_list_every_page_of_the_nav():
    readme = (ROOT / "README.md").read_text()
    documentation = readme[readme.index("## Documentation"):]
    home = (ROOT / "docs/index.md").read_text()
    pages = listed_pages()
    assert {"tenants.md", "rerank.md", "autoscaling.md", "performance.md", "protocols.md"} <= pages
    assert pages - set(re.findall(r"\]\(docs/([^)#]+)", documentation)) == set(), "missing from the README"
    assert pages - set(re.findall(r"\]\(([^)#:]+)", home)) == set(), "missing from docs/index.md"
