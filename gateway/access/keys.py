"""Tenants' keys: where each key comes from, its SHA-256 digest, and the one lookup from a
presented key to its tenant.

This module holds keys, for the moment it takes to hash them: it must never log one, nor
its digest, nor put either in an error message, a metric or a span (an error names the
tenant and the config key, e.g. `tenants[1].key_file`, never the value). A key is read
from its source (`KeySource`: an environment variable, a file, or digests written in the
config) and only its digest is kept. `Directory.find` hashes a presented key and looks the
digest up in one dictionary: no loop over tenants, no string comparison that could exit
early on the first differing character (what the lookup's time could tell is which
digest's hash bucket was probed, which says nothing of a key).

It knows no TOML, no front end and no scheduler: the config (`gateway.config`) declares
tenants, the front door (`gateway.access.front_door`) asks this module who a key belongs to.
"""
from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

DIGEST = re.compile(r"[0-9a-fA-F]{64}")


class KeyUnavailable(ValueError):
    """A key source cannot be read or says something unusable; `field` is its config key
    (key_env, key_file, key_sha256), `problem` says what is wrong without the key."""

    def __init__(self, field: str, problem: str, index: int = -1) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem
        self.index = index  # the tenant's position among those declared, when known


class KeyConflict(ValueError):
    """Two tenants (by their positions among the declared ones) present the same key."""

    def __init__(self, first: int, second: int) -> None:
        super().__init__(f"tenants {first} and {second} share a key")
        self.first = first
        self.second = second


@dataclass(frozen=True, slots=True)
class KeySource:
    """Where a tenant's keys come from: exactly one of an environment variable's name, a
    file's path (re-read on every reload), or the keys' SHA-256 digests (hex; several let
    keys rotate). It holds no key: `digests` reads them when asked."""
    env: str = ""
    file: str = ""
    sha256: tuple[str, ...] = ()

    @property
    def field(self) -> str:
        """The config key this source was given by."""
        return "key_env" if self.env else "key_file" if self.file else "key_sha256"

    def digests(self) -> frozenset[bytes]:
        """The SHA-256 digests of the keys it gives now; KeyUnavailable if it gives none."""
        if self.sha256:
            return frozenset(bytes.fromhex(value) for value in self.sha256)
        if self.env:
            key = os.environ.get(self.env, "")
            if not key:
                raise KeyUnavailable("key_env", "the environment variable it names is unset or empty")
            return frozenset({digest(key)})
        key = read_key_file(self.file).strip()  # a mounted Secret or `echo key > file` ends with a newline
        if not key:
            raise KeyUnavailable("key_file", "the file it names is empty")
        return frozenset({digest(key)})


# A key file holds a key: a few dozen bytes, a few hundred for a JWT; past this it is not one.
MAX_KEY_FILE_BYTES = 64 * 1024
_NOT_REGULAR = "the file it names is not a regular file (a pipe, a device or a directory)"


def read_key_file(path: str) -> str:
    """A key file's text: a regular file of at most `MAX_KEY_FILE_BYTES`, UTF-8. A named
    pipe or a device is refused before it is opened (reading a pipe waits for a writer, a
    device may never end), and a larger file once it is; KeyUnavailable says what is wrong
    with the file, never its path (a key written where its path belongs) nor what it holds.
    Blocking I/O all the same: the gateway reads keys off its loop."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise KeyUnavailable("key_file", _NOT_REGULAR)
        # O_NONBLOCK: should it have been swapped for a pipe since, the open does not wait for a writer.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        try:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                raise KeyUnavailable("key_file", _NOT_REGULAR)
            data = b""
            while len(data) <= MAX_KEY_FILE_BYTES and (chunk := os.read(descriptor, MAX_KEY_FILE_BYTES + 1 - len(data))):
                data += chunk
        finally:
            os.close(descriptor)
        if len(data) > MAX_KEY_FILE_BYTES:
            raise KeyUnavailable("key_file", f"the file it names is larger than {MAX_KEY_FILE_BYTES // 1024} KiB: "
                                             "not a key")
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise KeyUnavailable("key_file", f"cannot read the file it names: {type(error).__name__}") from None


# CPython's own SHA-256 hashes a key of a few dozen bytes in half the time OpenSSL's takes
# to set up (0.76 against 1.36 us here); the digest is the same.
try:
    from _sha256 import sha256 as _sha256  # Python 3.11
except ImportError:  # 3.12 renamed it
    _sha256 = hashlib.sha256


def key_bytes(key: str) -> bytes:
    """A key's bytes: its UTF-8, with bytes that were not UTF-8 where it came from (an
    environment variable, a header) kept as they were (Python's surrogateescape, as
    `os.environ` decodes them)."""
    return key.encode("utf-8", "surrogateescape")


def digest(key: str) -> bytes:
    """A key's SHA-256 digest, over its bytes (`key_bytes`: what `sha256sum` prints for the
    key written without a newline, `printf %s "$KEY" | sha256sum`, in a UTF-8 shell)."""
    return _sha256(key_bytes(key)).digest()


@dataclass(frozen=True, slots=True)
class Tenant:
    """Who a key belongs to, as the front door needs it: its name and the models it may
    call (None: all)."""
    name: str
    models: frozenset[str] | None = None

    def may_call(self, model: str) -> bool:
        return self.models is None or model in self.models


class Directory:
    """Every declared tenant by the digests of its keys: `find` is one hash and one
    dictionary lookup, whatever the number of tenants."""

    def __init__(self, by_digest: Mapping[bytes, Tenant]) -> None:
        self._by_digest = dict(by_digest)
        self._by_name = {tenant.name: tenant for tenant in by_digest.values()}

    def find(self, key: str) -> Tenant | None:
        """The tenant whose key `key` is, or None."""
        return self._by_digest.get(digest(key))

    def with_digest(self, key_digest: bytes) -> Tenant | None:
        """The tenant whose key has this digest (`digest`), or None: a request admitted
        before a reload is found again by it, without its key."""
        return self._by_digest.get(key_digest)

    def rekeyed(self, before: Directory, names: Iterable[str]) -> set[str]:
        """Those of `names` whose keys here are not the keys they had in `before` (a reload's
        rotation): names only, for the reload's log line."""
        now, then = self._keys_by_name(), before._keys_by_name()
        return {name for name in names if now.get(name) != then.get(name)}

    def _keys_by_name(self) -> dict[str, set[bytes]]:
        found: dict[str, set[bytes]] = {}
        for key_digest, tenant in self._by_digest.items():
            found.setdefault(tenant.name, set()).add(key_digest)
        return found

    def named(self, name: str) -> Tenant | None:
        """The tenant of that name (as `find` gave it), or None if it is no longer declared."""
        return self._by_name.get(name)

    def __len__(self) -> int:
        return len(self._by_name)


def directory(tenants: Iterable[tuple[Tenant, KeySource]]) -> Directory:
    """The directory of these tenants, each key read from its source now (at the start, and
    again on every reload). KeyUnavailable (with the tenant's position as `index`) for a
    source that gives no key; KeyConflict when one key is given to two tenants."""
    by_digest: dict[bytes, Tenant] = {}
    owner: dict[bytes, int] = {}
    for index, (tenant, source) in enumerate(tenants):
        try:
            digests = source.digests()
        except KeyUnavailable as error:
            raise KeyUnavailable(error.field, error.problem, index) from None
        for value in digests:
            if value in owner and owner[value] != index:
                raise KeyConflict(owner[value], index)
            owner[value] = index
            by_digest[value] = tenant
    return Directory(by_digest)
