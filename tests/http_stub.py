"""Small HTTP servers the tests stand up in place of a predictor: a handler with a JSON
answer and no access log (`JsonHandler`), served on a free loopback port from a thread
and stopped when the block ends (`serving`)."""
from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from typing import Any

import orjson


class JsonHandler(http.server.BaseHTTPRequestHandler):
    def read_json(self) -> Any:
        return orjson.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def answer_json(self, document: Any, status: int = 200) -> None:
        body = orjson.dumps(document)
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """`handler` on 127.0.0.1 at a free port, each request in its own thread; its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
