"""`python -m tests.backends.stalled_resolver serve ...`: the gateway, unmodified, in a
process whose system resolver the test controls, for one name only (`NAME`).

`NAME` resolves to 127.0.0.1 until the file `stall` appears in `$STALLED_RESOLVER_DIR`;
from then on a lookup of it writes the file `stalled` there and never returns, as a lookup
sent to an unreachable DNS server hangs for its retries. Any other name resolves as usual.
The gateway's code is not touched: only `socket.getaddrinfo`, the resolver every Python
lookup goes through, is wrapped before the gateway starts."""
from __future__ import annotations

import os
import socket
import sys
import threading
from pathlib import Path
from typing import Any

NAME = "stalled-resolver.test"  # .test: a name no real resolver answers (RFC 2606)
_system_getaddrinfo = socket.getaddrinfo


def _getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
    if host != NAME:
        return _system_getaddrinfo(host, port, *args, **kwargs)
    folder = Path(os.environ["STALLED_RESOLVER_DIR"])
    if (folder / "stall").exists():
        (folder / "stalled").touch()
        threading.Event().wait()  # never set: the lookup hangs
    return _system_getaddrinfo("127.0.0.1", port, *args, **kwargs)


if __name__ == "__main__":
    socket.getaddrinfo = _getaddrinfo
    from gateway.cli import main
    sys.exit(main(sys.argv[1:]))
