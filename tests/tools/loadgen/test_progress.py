"""tools.loadgen.progress: the bar goes to stderr and ends at 100%."""
from __future__ import annotations

from tests.tools.loadgen.support import run


async def test_progress_bar_goes_to_stderr(local_server, capsys):
    await run(target=f"{local_server.url}/slow", requests=10, concurrency=1, progress=True)
    err = capsys.readouterr().err
    assert "10/10 done" in err and "100%" in err
