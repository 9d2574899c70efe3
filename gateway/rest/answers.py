"""What every HTTP answer shares, whichever path sends it: its `Date` (formatted once a
second), a successful body compressed as the client's Accept-Encoding allows
(`compressed`), and the access-log line (`log_access`).

It knows `wire.codecs.content_encoding` and Tornado's access logger, no handler and no
connection.
"""
from __future__ import annotations

import logging
import time

import tornado.httputil
import tornado.log

from wire.codecs import content_encoding

_date = (0, "")  # (second, its HTTP date): the Date header of every answer in that second


def http_date() -> str:
    """The `Date` of an answer sent now (email.utils' formatting, on every answer, was ~1%
    of a request)."""
    global _date
    now = int(time.time())
    if _date[0] != now:
        _date = (now, tornado.httputil.format_timestamp(now))
    return _date[1]


def compressed(body: str | bytes | dict, accept: str) -> tuple[str | bytes | dict, dict[str, str]]:
    """A 200's body and the headers to add, for a client that sent `accept` as its
    Accept-Encoding: `Vary` always, and the body encoded with `Content-Encoding` when a
    coding it takes gains something. An error is never compressed (tritonclient reads error
    bodies without decompressing them)."""
    headers = {"Vary": "Accept-Encoding"}
    coding = content_encoding.negotiate(accept)
    if coding is None or isinstance(body, dict):
        return body, headers
    encoded = content_encoding.encode(coding, body.encode() if isinstance(body, str) else body)
    if encoded is None:
        return body, headers  # too small to gain anything
    headers["Content-Encoding"] = coding
    return encoded, headers


def log_access(status: int, method: str, uri: str, remote_ip: str, seconds: float, tenant: str) -> None:
    """Tornado's access-log line (INFO, WARNING for a 4xx, ERROR for a 5xx), with the tenant
    whose key the request came with: its name, never the key. Nothing is formatted unless
    the level is logged."""
    logger = tornado.log.access_log
    level = logging.INFO if status < 400 else logging.WARNING if status < 500 else logging.ERROR
    if not logger.isEnabledFor(level):
        return
    summary = f"{method} {uri} ({remote_ip})"
    if tenant:
        logger.log(level, "%d %s %.2fms tenant=%s", status, summary, 1000.0 * seconds, tenant,
                   extra={"tenant": tenant})
    else:
        logger.log(level, "%d %s %.2fms", status, summary, 1000.0 * seconds)
