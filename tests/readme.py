"""The README's shell blocks, as the tests that run its commands read them: the first
```sh block after a given heading or phrase, one command per line (continuation lines
joined, comments and blank lines left out). It knows no command and no server."""
from __future__ import annotations

import re

from tests.processes import ROOT


def commands_after(marker: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index(marker):]
    start = section.index("```sh") + 5
    block = section[start:section.index("```", start)]
    commands = re.sub(r"\\\n\s*", " ", block).splitlines()
    return [c.strip() for c in commands if c.strip() and not c.strip().startswith("#")]
