"""The `[[tenants]]` tables (docs/tenants.md): who shares the gateway, where each one's keys
come from, and what the scheduler knows of it.

A tenant's level, weight and quotas are declared once, on TenantPolicy's fields
(`gateway.batching.config`); its name, key sources and models here. The rules between keys
(exactly one key source, models that exist, the token's tenant) are the functions here. Its
keys are read by `gateway.access.keys`, never held or said here. No error of a tenant's table
repeats a value of it (any could be a key written in the wrong field): it names the key, the
table and, once its name is read, the tenant.
"""
from __future__ import annotations

import re
from collections.abc import Set
from dataclasses import dataclass
from typing import Any

from gateway.access.keys import DIGEST, Directory, KeyConflict, KeySource, KeyUnavailable, Tenant, directory
from gateway.batching.config import TenantPolicy
from gateway.config_keys import ConfigError, Key, Kind, Table, declared, fields, read, value

# With [server] auth_token_env and [[tenants]], the token is the key of one more tenant, this one.
DEFAULT_TENANT = "default"
KEY_SOURCES = ("key_env", "key_file", "key_sha256")
_TENANT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")

TENANTS = Table("tenants[]", "[[tenants]]", (
    Key("name", Kind.STRING, "The tenant's name, in metrics, logs and spans (never its key); required, unique.",
        required=True),
    Key("key_env", Kind.STRING, "The environment variable holding its key. Exactly one of key_env, key_file and "
                                "key_sha256.", required=True, apart=True),
    Key("key_file", Kind.STRING, "A file holding its key (a mounted Secret), read again on SIGHUP.", required=True,
        apart=True),
    Key("key_sha256", Kind.STRINGS, "The SHA-256 digests (hex) of its keys; several let a key rotate."),
    Key("models", Kind.STRINGS, "The models it may call; another is refused 403. [] for a key that only reads "
                                "/metrics and the live page.", shown="all"),
    *declared(TenantPolicy),
), echo=False)


@dataclass(frozen=True, slots=True)
class TenantConfig:
    """A `[[tenants]]` table: what the scheduler knows of it (`policy`: its name, level,
    weight and quotas), the models it may call (None: all) and where its keys come from
    (`key`: read by `gateway.access.keys`, never held here)."""
    policy: TenantPolicy
    key: KeySource
    models: tuple[str, ...] | None = None
    declared_at: str = ""  # its table, as errors name it: "tenants[2]", or "server" (DEFAULT_TENANT)

    @property
    def name(self) -> str:
        return self.policy.name

    @property
    def key_setting(self) -> str:
        """The config key its key is given by, as errors name it."""
        return "server.auth_token_env" if self.declared_at == "server" else f"{self.declared_at}.{self.key.field}"

    @property
    def tenant(self) -> Tenant:
        """As the front door knows it (`gateway.access.keys`)."""
        return Tenant(self.name, None if self.models is None else frozenset(self.models))


def tenants(raw: Any, token_env: str, models: Set[str]) -> tuple[TenantConfig, ...]:
    """The `[[tenants]]` tables; with `[server] auth_token_env` too, its token is the key of
    one more tenant, `default`, which may call every model."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("tenants", "must be an array of tables: [[tenants]]")  # (its value unsaid)
    found: list[TenantConfig] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(raw):
        tenant = _tenant(item, f"tenants[{index}]", models)
        if tenant.name in seen:
            raise ConfigError(f"tenants[{index}].name", f"the same name as tenants[{seen[tenant.name]}]'s: "
                                                        f"each tenant's name is its own")
        if tenant.name == DEFAULT_TENANT and token_env:
            raise ConfigError(f"tenants[{index}].name", f"'{DEFAULT_TENANT}' is the tenant whose key is [server] "
                                                        f"auth_token_env's: name this one otherwise")
        seen[tenant.name] = index
        found.append(tenant)
    if token_env and found:
        found.append(TenantConfig(TenantPolicy(DEFAULT_TENANT), KeySource(env=token_env), declared_at="server"))
    return tuple(found)


def _tenant(raw: Any, key: str, models: Set[str]) -> TenantConfig:
    if not isinstance(raw, dict):
        raise ConfigError(key, "must be a table")
    values = read(TENANTS, raw, key)
    if not _TENANT_NAME.fullmatch(values["name"]):
        raise ConfigError(f"{key}.name", "must be 1 to 64 letters, digits, '_', '-' or '.' (it labels metrics)")
    given = [source for source in KEY_SOURCES if source in raw]
    if not given:
        raise ConfigError(key, f"needs its key: one of {', '.join(KEY_SOURCES)}")
    if len(given) > 1:
        raise ConfigError(f"{key}.{given[1]}", f"give exactly one of {', '.join(KEY_SOURCES)}, not {given[0]} too")
    policy = TenantPolicy(**fields(TenantPolicy, values))
    return TenantConfig(policy, _key_source(raw, key, given[0]), _tenant_models(raw, key, models), key)


def _key_source(raw: dict, key: str, source: str) -> KeySource:
    # What is wrong is said without the value: a key pasted where its digest belongs stays unsaid.
    if source == "key_env":
        return KeySource(env=value(TENANTS["key_env"], raw, key, echo=False))
    if source == "key_file":
        return KeySource(file=value(TENANTS["key_file"], raw, key, echo=False))
    digests = raw["key_sha256"]
    if not isinstance(digests, list) or not digests:
        raise ConfigError(f"{key}.key_sha256", "must be a list of SHA-256 digests, 64 hex digits each")
    for index, digest in enumerate(digests):
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            raise ConfigError(f"{key}.key_sha256[{index}]", "is not a SHA-256 digest (64 hex digits: printf %s "
                                                            "\"$KEY\" | sha256sum)")
    return KeySource(sha256=tuple(digest.lower() for digest in digests))


def _tenant_models(raw: dict, key: str, models: Set[str]) -> tuple[str, ...] | None:
    if "models" not in raw:
        return None
    names = raw["models"]
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise ConfigError(f"{key}.models", "must be a list of model names")
    for index, name in enumerate(names):
        if name not in models:
            raise ConfigError(f"{key}.models[{index}]", "is not the name of one of the [[models]]")
    return tuple(names)


def tenant_directory(tenants: tuple[TenantConfig, ...]) -> Directory:
    """The tenants' keys read now (`gateway.access.keys`): at the start, on every reload, and by
    `check-config`. ConfigError naming the table's key and its tenant when a source gives no
    key, or when one key is given to two tenants (never saying the key, nor the variable or
    file it names: either could be the key)."""
    try:
        return directory((tenant.tenant, tenant.key) for tenant in tenants)
    except KeyUnavailable as error:
        tenant = tenants[error.index]
        raise ConfigError(tenant.key_setting, f"(tenant '{tenant.name}') {error.problem}") from None
    except KeyConflict as error:
        first = tenants[error.first]
        raise ConfigError(tenants[error.second].key_setting, f"gives the same key as {first.key_setting} (tenant "
                                                             f"'{first.name}'): each key belongs to one tenant") from None
