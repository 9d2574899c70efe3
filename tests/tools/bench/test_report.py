"""tools/bench/report.py: the markdown tables of results.md."""
from __future__ import annotations

from tools.bench import report


def test_markdown_table_formats_cells():
    columns = [["name", "run", "s"], ["rps", "req/s", ".1f"], ["ratio", "ratio", ".0%"]]
    table = report.markdown_table(columns, [{"name": "a", "rps": 12.345, "ratio": 0.5}, {"name": "b"}])
    assert table.splitlines() == ["| run | req/s | ratio |", "|---|---:|---:|", "| a | 12.3 | 50% |",
                                  "| b | – | – |"]
