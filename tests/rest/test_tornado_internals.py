"""gateway/rest/tornado_internals.py: every private name of Tornado's the front end uses is
still there in the Tornado installed. An upgrade that renames or drops one fails here,
naming it and the adapter to re-check, not as a quiet change in how the gateway answers."""
from __future__ import annotations

import importlib
import inspect
import pathlib
import re

import pytest
import tornado

from gateway.rest.tornado_internals import PRIVATE_NAMES


def owner(dotted: str) -> object:
    """The class (or function) `dotted` names, e.g. tornado.web.RequestHandler.clear."""
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):  # the longest importable module first
        try:
            found: object = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[split:]:
            found = getattr(found, attribute)
        return found
    raise AssertionError(f"Tornado {tornado.version}: {dotted} is gone; re-check gateway/rest/tornado_internals.py")


@pytest.mark.parametrize("dotted", sorted(PRIVATE_NAMES))
def test_each_private_name_the_adapter_uses_is_still_tornados(dotted):
    held = owner(dotted)
    # A name is either a class attribute, or an attribute its source sets (self.<name> =).
    source = inspect.getsource(held)  # type: ignore[arg-type]
    for name in PRIVATE_NAMES[dotted]:
        assert hasattr(held, name) or f"self.{name} =" in source or f"self.{name}:" in source, (
            f"Tornado {tornado.version}: {dotted} no longer has {name}; re-check gateway/rest/tornado_internals.py")


def test_the_answer_reset_sets_what_tornados_own_clear_sets():
    """Our clear() replaces Tornado's whole: it must set every attribute Tornado's sets."""
    import tornado.web

    source = inspect.getsource(tornado.web.RequestHandler.clear)
    assigned = {line.split("=")[0].strip().removeprefix("self.").split(":")[0]
                for line in source.splitlines() if line.strip().startswith("self._") and "=" in line}
    assert assigned <= set(PRIVATE_NAMES["tornado.web.RequestHandler.clear"]), (
        f"Tornado {tornado.version}'s RequestHandler.clear sets {sorted(assigned)}; "
        "gateway/rest/tornado_internals.reset_answer must set the same")


def test_no_module_but_the_adapter_uses_a_private_name_of_tornados():
    """Each private name listed is used in gateway/rest/tornado_internals.py alone (the gateway,
    its predictors' clients, the wire and the tools): elsewhere, a renamed one would break
    unchecked."""
    root = pathlib.Path(__file__).resolve().parents[2]
    private = sorted({name for names in PRIVATE_NAMES.values() for name in names if name.startswith("_")})
    pattern = re.compile(r"\.(" + "|".join(private) + r")\b")
    adapter = root / "gateway" / "rest" / "tornado_internals.py"
    used = [f"{path.relative_to(root)}:{number}: {line.strip()}"
            for room in ("gateway", "backends", "wire", "tools") for path in sorted((root / room).rglob("*.py"))
            if path != adapter and "generated" not in path.parts
            for number, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert used == []


# -- write_whole_answer: one prebuilt write, the connection left as Tornado's own path leaves it --

import asyncio  # noqa: E402
import socket  # noqa: E402

import tornado.http1connection  # noqa: E402
import tornado.httputil  # noqa: E402
import tornado.iostream  # noqa: E402

from gateway.rest import tornado_internals  # noqa: E402

DATE = "Tue, 02 Dec 2025 10:00:00 GMT"
PARAMS = tornado.http1connection.HTTP1ConnectionParameters()


def _drainable(head):
    return "Transfer-Encoding" not in head and int(head.get("Content-Length", "0")) <= 100


def _request(version, method, fields):
    return tornado.httputil.RequestStartLine(method, "/v1/models/m:predict", version), tornado.httputil.HTTPHeaders(fields)


def _connection(version, method, fields, read_finished):
    """An answering connection over a socket pair, as Tornado's reading leaves it when the
    answer goes: its request's head read, keep-alive decided, the body read or not."""
    ours, peer = socket.socketpair()
    stream = tornado.iostream.IOStream(ours)
    conn = tornado.http1connection.HTTP1Connection(stream, False, PARAMS)
    start_line, headers = _request(version, method, fields)
    conn._request_start_line = start_line
    conn._request_headers = headers
    conn._disconnect_on_finish = not conn._can_keep_alive(start_line, headers)
    conn._read_finished = read_finished
    tornado_internals.keep_after_early_answer(conn, _drainable)
    return conn, peer


def _state(conn):
    """The connection's attributes, a future by whether it is done, the stream by what Tornado's write changes."""
    state = {}
    for name, value in vars(conn).items():
        if name == "stream":  # closed or not, and its write accounting and interest in events
            state[name] = (value.closed(), value._total_write_index, value._total_write_done_index,
                           len(value._write_buffer or ()), len(value._write_futures or ()), value._state)
        elif isinstance(value, asyncio.Future):
            state[name] = ("future", value.done())
        else:
            state[name] = value
    return state


def _send(tornados, conn, code, answer_fields, body):
    """The answer by Tornado's own path (`tornados`) or by `write_whole_answer`: None, or
    the HTTPOutputError it raised (a body where none goes: a HEAD's answer)."""
    try:
        if not tornados:
            tornado_internals.write_whole_answer(conn, code, answer_fields, DATE, body)
            return None
        head = tornado.httputil.HTTPHeaders()
        for name, value in answer_fields.items():
            head[name] = value
        head["Date"] = DATE
        head["Content-Length"] = str(len(body))
        conn.write_headers(tornado.httputil.ResponseStartLine("HTTP/1.1", code, tornado.httputil.responses[code]),
                           head, body)
        conn.finish()
    except tornado.httputil.HTTPOutputError as error:
        return str(error)
    return None


def _whole(sent, body):
    _, end_of_head, rest = sent.partition(b"\r\n\r\n")
    return bool(end_of_head) and len(rest) >= len(body)


def _available(peer):
    """What the peer can read now, with `<closed>` once the connection is closed."""
    got = b""
    while True:
        try:
            data = peer.recv(1 << 20)
        except BlockingIOError:
            return got
        if not data:
            return got + b"<closed>"
        got += data


async def _answered(tornados, version, method, fields, read_finished, code, answer_fields, body):
    """What the answer raised, the bytes the peer got (and whether the connection then
    closed), and the connection's state after."""
    conn, peer = _connection(version, method, fields, read_finished)
    try:
        raised = _send(tornados, conn, code, answer_fields, body)
        peer.setblocking(False)
        sent = b""
        # Read until the answer is whole (a large one takes several writes as the peer reads);
        # 10 s is a generous bound for a few megabytes over a socket pair, even on a loaded machine.
        deadline = asyncio.get_running_loop().time() + 10.0
        while raised is None and not _whole(sent, body):
            assert asyncio.get_running_loop().time() < deadline, "the answer never came whole"
            await asyncio.sleep(0.001)
            sent += _available(peer)
        for _ in range(3):
            await asyncio.sleep(0)  # any callback Tornado scheduled has run
        sent += _available(peer)
        return raised, sent, _state(conn)
    finally:
        conn.stream.close()
        peer.close()


REQUESTS = [
    ("HTTP/1.1", "POST", {"Content-Length": "10"}),
    ("HTTP/1.1", "POST", {"Content-Length": "10", "Connection": "close"}),
    ("HTTP/1.1", "POST", {"Content-Length": "5000"}),
    ("HTTP/1.1", "POST", {"Transfer-Encoding": "chunked"}),
    ("HTTP/1.0", "POST", {"Content-Length": "10"}),
    ("HTTP/1.0", "POST", {"Content-Length": "10", "Connection": "keep-alive"}),
    ("HTTP/1.0", "POST", {"Content-Length": "10", "Connection": "Keep-Alive"}),
    ("HTTP/1.1", "HEAD", {}),
]
ANSWERS = [
    (200, {"Content-Type": "application/json", "x-batch-id": "b1"}, b'{"predictions": [1]}'),
    (404, {"Content-Type": "application/json"}, b'{"error": "no such model"}'),
    (503, {"Content-Type": "application/json", "Retry-After": "1", "Connection": "close"}, b"{}"),
    (200, {"Content-Type": "text/plain"}, b""),
    (204, {}, b""),
    (200, {"Content-Type": "application/octet-stream"}, bytes(range(256)) * 16384),  # 4 MiB: several writes
]


@pytest.mark.parametrize("read_finished", [True, False], ids=["after the body", "before the body"])
@pytest.mark.parametrize("answer", ANSWERS, ids=[f"{code} {sorted(fields)} {len(body)}" for code, fields, body in ANSWERS])
@pytest.mark.parametrize("request_", REQUESTS, ids=[f"{v} {m} {sorted(f.items())}" for v, m, f in REQUESTS])
async def test_a_whole_answer_sends_the_bytes_and_leaves_the_connection_as_tornados_write_headers_and_finish(
        request_, answer, read_finished):
    """Against the Tornado installed: the keep-alive decision (HTTP/1.1 and 1.0, a client's
    `Connection`, an answer's, an answer before a small or large or chunked body), the
    header names' spelling, `Connection: close` and `Keep-Alive` added, the bytes sent, the
    close, and every attribute of the connection after."""
    version, method, fields = request_
    ours = await _answered(False, version, method, fields, read_finished, *answer)
    tornados = await _answered(True, version, method, fields, read_finished, *answer)
    assert ours == tornados


@pytest.mark.parametrize("bad", ["a\r\nInjected: 1", "a\nb", "a\rb"])
async def test_a_whole_answer_with_a_header_line_holding_cr_or_lf_is_refused_as_tornado_refuses_it(bad):
    for tornados in (False, True):
        with pytest.raises(ValueError, match="Illegal characters"):
            await _answered(tornados, "HTTP/1.1", "POST", {"Content-Length": "1"}, True, 200, {"X-Thing": bad}, b"x")
