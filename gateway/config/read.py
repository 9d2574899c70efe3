"""The one reader of a TOML table: its declared keys (`gateway.config_keys`) checked and
converted, the same way and with the same messages for every table.

Every problem is a ConfigError naming the key as a user finds it in the file
(`models[0].batching.max_batch_size`) and what is wrong with it. It knows the declarations
and nothing of what a table means: the rules between keys are their table's own.
"""
from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Set
from typing import Any

from gateway.config_keys import Key, Kind, Table


class ConfigError(ValueError):
    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


def read(table: Table, raw: dict, where: str, also: Set[str] = frozenset()) -> dict[str, Any]:
    """Every key of `table` the one reader reads, by the field it lands in: its value checked
    and converted, else its default. A key neither declared nor in `also` is refused."""
    only(raw, where, table.names() | also)
    return {key.field or key.name: value(key, raw, where) for key in table.keys if key.read}


def value(key: Key, raw: dict, where: str) -> Any:
    """One scalar key of `raw`, checked by its declaration; absent (TOML has no null): its default."""
    at = f"{where}.{key.name}"
    given = raw.get(key.name)
    if key.kind is Kind.BOOLEAN:
        if given is not None and not isinstance(given, bool):
            raise ConfigError(at, f"must be true or false, got {given!r}")
    elif key.kind is Kind.STRING and key.choices:
        if given is not None and given not in key.choices:
            raise ConfigError(at, f"must be one of {', '.join(key.choices)}; got {given!r}")
    elif key.kind is Kind.STRING:
        return _string(key, given, at)
    elif key.kind in (Kind.INTEGER, Kind.NUMBER):
        return key.value if given is None else _number(key, given, at)
    else:
        raise TypeError(f"{at}: a {key.kind.value} is read by its table's own function")
    return key.value if given is None else given


def _string(key: Key, given: Any, at: str) -> str:
    if given is None:
        if key.required:
            raise ConfigError(at, "is required")
        return key.value
    if not isinstance(given, str) or (key.required and not given):
        raise ConfigError(at, f"must be a non-empty string, got {given!r}")
    if key.file and given and not os.path.isfile(given):
        raise ConfigError(at, f"no such file: {given}")
    return given or key.value  # an empty string says nothing: the default


def _number(key: Key, given: Any, at: str) -> Any:
    integer = key.kind is Kind.INTEGER
    if isinstance(given, bool) or not isinstance(given, int if integer else (int, float)):
        raise ConfigError(at, f"must be {'an integer' if integer else 'a number'}, got {given!r}")
    if key.minimum is not None and not given >= key.minimum:  # written so that NaN fails it too
        raise ConfigError(at, f"must be >= {key.minimum:g}, got {given}")
    if key.maximum is not None and given > key.maximum:
        raise ConfigError(at, f"must be <= {key.maximum:g}, got {given}")
    if key.positive and (not given > 0 or (key.finite and not math.isfinite(given))):  # NaN too
        raise ConfigError(at, key.positive.format(value=given))
    return given if key.per is None else float(given) / key.per


def only(raw: dict, where: str, allowed: Set[str]) -> None:
    """Refuse a key `allowed` does not hold, naming it and what is allowed."""
    for name in raw:
        if name not in allowed:
            at = f"{where}.{name}" if where else name
            raise ConfigError(at, f"unknown key (allowed: {', '.join(sorted(allowed))})")


def table(raw: dict, name: str, where: str) -> dict:
    """The sub-table `name` of `raw` (empty when absent)."""
    found = raw.get(name, {})
    if not isinstance(found, dict):
        raise ConfigError(where, "must be a table")
    return found


def fields(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """The values that are fields of `cls`, to build it with."""
    names = {item.name for item in dataclasses.fields(cls)}
    return {name: found for name, found in values.items() if name in names}
