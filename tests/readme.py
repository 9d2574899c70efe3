"""The README's (and the docs pages') code blocks, as the tests that run them read them: the
first block of a language after a given heading or phrase; a shell block as one command per
line (continuation lines joined, comments and blank lines left out). It knows no command
and no server."""
from __future__ import annotations

import re

from tests.processes import ROOT


def block_after(marker: str, language: str, document: str = "README.md") -> str:
    """The first ```<language> block after `marker` in `document` (a path from the root)."""
    text = (ROOT / document).read_text()
    section = text[text.index(marker):]
    fence = f"```{language}\n"
    start = section.index(fence) + len(fence)
    return section[start:section.index("```", start)]


def commands_after(marker: str, document: str = "README.md") -> list[str]:
    commands = re.sub(r"\\\n\s*", " ", block_after(marker, "sh", document)).splitlines()
    return [c.strip() for c in commands if c.strip() and not c.strip().startswith("#")]
