"""The `[shared]` table: the store that holds the tenants' quotas together across gateway
replicas (docs/tenants.md, "Many replicas, one set of quotas"; `gateway.shared.store`).

Each key is declared once, on SharedConfig's fields; the rule between keys (exactly one of
`url` and `url_env`, a url of a scheme Redis speaks) is `shared` here. The url may hold a
password, so it is a secret: no error, log line or page repeats it (the variable's name, or
the key's, is said instead). It knows no tenant and no Redis client.
"""
from __future__ import annotations

import importlib.util
import os
import urllib.parse
from dataclasses import dataclass, replace
from typing import Any

from gateway.config_keys import ConfigError, Kind, Table, declared, key, read, table

SCHEMES = ("redis", "rediss")
ON_UNAVAILABLE = ("local", "refuse")


@dataclass(frozen=True, slots=True)
class SharedConfig:
    """`[shared]`: with a url, every replica that names the same store holds each tenant's
    `requests_per_second`, `tokens_per_minute` and `max_concurrent` together."""
    url: str = key(Kind.STRING, "", "The store: redis://host:port/db or rediss:// (TLS); Redis or Valkey. It may hold "
                                    "a password: it is never logged. Exactly one of url and url_env.")
    url_env: str = key(Kind.STRING, "", "The environment variable holding the url (a Secret's), read at the start.")
    on_unavailable: str = key(Kind.STRING, "local", "While the store cannot be reached: `local`, every replica holds "
                                                    "each quota on its own; `refuse`, tenants with quotas get 503.",
                              choices=ON_UNAVAILABLE)
    timeout_s: float = key(Kind.NUMBER, 100, "The longest a request waits on the store (each call); past it the "
                                               "store counts as away.", name="timeout_ms", per=1000, minimum=1,
                           maximum=10000)
    slot_expiry_s: float = key(Kind.NUMBER, 10000, "A replica renews its hold on its max_concurrent slots this often "
                                                  "x3; a replica that dies holds them at most this long.",
                               name="slot_expiry_ms", per=1000, minimum=1000, maximum=600000)
    slice: float = key(Kind.NUMBER, 0.1, "The share of a tenant's bucket a replica leases at once and serves from "
                                         "without a round trip; replicas x slice x the bucket is the most the quota "
                                         "can be overshot by.", minimum=0.001, maximum=1)
    key_prefix: str = key(Kind.STRING, "gateway", "Prefix of the store's keys: gateways that share a store but not "
                                                  "their quotas use different ones.")

    @property
    def enabled(self) -> bool:
        return bool(self.url)

    def __repr__(self) -> str:  # the url may hold a password: a repr in a log or a traceback says none
        return (f"SharedConfig(url={redacted(self.url)!r}, url_env={self.url_env!r}, "
                f"on_unavailable={self.on_unavailable!r}, timeout_s={self.timeout_s}, "
                f"slot_expiry_s={self.slot_expiry_s}, slice={self.slice}, key_prefix={self.key_prefix!r})")


SHARED = Table("shared", "[shared]", declared(SharedConfig))


def shared(document: dict[str, Any]) -> SharedConfig:
    """`[shared]` (none: quotas held in each process, as without it), its url read from
    `url_env` when given."""
    raw = table(document, "shared", "shared")
    config = SharedConfig(**read(SHARED, raw, "shared"))
    if "shared" not in document:
        return config
    if bool(config.url) == bool(config.url_env):
        raise ConfigError("shared", "give exactly one of url and url_env")
    where = "shared.url"
    url = config.url
    if config.url_env:
        where = f"shared.url_env ({config.url_env})"
        url = os.environ.get(config.url_env, "").strip()
        if not url:
            raise ConfigError("shared.url_env", f"environment variable {config.url_env} is unset or empty")
    try:
        parsed = urllib.parse.urlsplit(url)
        port = parsed.port
    except ValueError:
        parsed, port = None, None
    if parsed is None or parsed.scheme not in SCHEMES or not parsed.hostname:
        # The url itself is not repeated: it may hold a password.
        raise ConfigError(where, "must be redis://host:port/db or rediss://host:port/db")
    del port
    if importlib.util.find_spec("redis") is None:
        raise ConfigError("shared", "needs the `shared` extra (Redis's client): pip install 'batching-gateway[shared]'")
    return replace(config, url=url)


def redacted(url: str) -> str:
    """The url as a log line may say it: scheme, host, port and database, never a user or password."""
    if not url:
        return ""
    try:
        parsed = urllib.parse.urlsplit(url)
        port = f":{parsed.port}" if parsed.port else ""
    except ValueError:
        return "(a url)"
    return f"{parsed.scheme}://{parsed.hostname or ''}{port}{parsed.path}"
