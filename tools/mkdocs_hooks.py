"""The documentation site's one hook (mkdocs.yml `hooks:`): where a long name in inline code
may break.

Key and metric names (`gateway_http_connections_accepted_total`, `models[].batching.max_batch_cost`)
are single words to a browser. Material lets inline code break anywhere, so in a narrow table
column they broke mid-word ("gateway_batch_cos" / "t"); docs/stylesheets/extra.css stops that,
and this hook gives each name its sensible break points instead: a `<wbr>` after each `_`, `.`
and `/` inside inline `<code>` (never inside a `<pre>` block, whose lines scroll). A `<wbr>` is
no character: copying the name copies it whole.

It knows mkdocs' page hook and HTML, nothing of the gateway.
"""
from __future__ import annotations

import re
from typing import Any

_PRE = re.compile(r"(<pre\b.*?</pre>)", re.DOTALL)
_INLINE_CODE = re.compile(r"<code>([^<]*)</code>")
_BREAK_AFTER = re.compile(r"([_./])(?=\w)")


def with_break_points(html: str) -> str:
    """`html` with a `<wbr>` after each `_`, `.` and `/` that a word follows in inline code."""
    pieces = _PRE.split(html)
    for index in range(0, len(pieces), 2):  # the odd pieces are <pre> blocks: left alone
        pieces[index] = _INLINE_CODE.sub(
            lambda code: "<code>" + _BREAK_AFTER.sub(r"\1<wbr>", code[1]) + "</code>", pieces[index])
    return "".join(pieces)


def on_page_content(html: str, **_: Any) -> str:
    return with_break_points(html)
