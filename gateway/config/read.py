"""The one reader of a TOML table: its declared keys (`gateway.config_keys`) checked and
converted, the same way and with the same messages for every table.

Every problem is a ConfigError naming the key as a user finds it in the file
(`models[0].batching.max_batch_size`) and what is wrong with it, with the value given; a
table whose values may be a key pasted in the wrong field (`Table.echo` False: the tenants')
is told what is wrong without the value, and an unknown key of it is named only when its name
could not be one. It knows the declarations and nothing of what a table means: the rules
between keys are their table's own.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
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
    only(raw, where, table.names() | also, echo=table.echo)
    return {key.field or key.name: value(key, raw, where, echo=table.echo) for key in table.keys if key.read}


def value(key: Key, raw: dict, where: str, echo: bool = True) -> Any:
    """One scalar key of `raw`, checked by its declaration; absent (TOML has no null): its
    default. `echo` False: a problem is said without the value (its table's `echo`)."""
    at = f"{where}.{key.name}"
    given = raw.get(key.name)
    if key.kind is Kind.BOOLEAN:
        if given is not None and not isinstance(given, bool):
            raise ConfigError(at, f"must be true or false, got {_given(given, echo)}")
    elif key.kind is Kind.STRING and key.choices:
        if given is not None and given not in key.choices:
            raise ConfigError(at, f"must be one of {', '.join(key.choices)}; got {_given(given, echo)}")
    elif key.kind is Kind.STRING:
        return _string(key, given, at, echo)
    elif key.kind in (Kind.INTEGER, Kind.NUMBER):
        return key.value if given is None else _number(key, given, at, echo)
    else:
        raise TypeError(f"{at}: a {key.kind.value} is read by its table's own function")
    return key.value if given is None else given


# TOML's types as a problem names them when it may not repeat the value.
_TYPES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
          dict: "a table"}


def _given(given: Any, echo: bool) -> str:
    """The value given, as a problem repeats it; without `echo`, only its type."""
    return repr(given) if echo else _TYPES.get(type(given), "a date or time")


def _string(key: Key, given: Any, at: str, echo: bool) -> str:
    if given is None:
        if key.required:
            raise ConfigError(at, "is required")
        return key.value
    if not isinstance(given, str) or (key.required and not given):
        empty = isinstance(given, str) and not echo  # (its type is no news)
        raise ConfigError(at, "must be a non-empty string" + ("" if empty else f", got {_given(given, echo)}"))
    if key.file and given and not os.path.isfile(given):
        raise ConfigError(at, f"no such file: {given}" if echo else "no such file")
    return given or key.value  # an empty string says nothing: the default


def _number(key: Key, given: Any, at: str, echo: bool) -> Any:
    integer = key.kind is Kind.INTEGER
    got = f", got {given}" if echo else ""
    if isinstance(given, bool) or not isinstance(given, int if integer else (int, float)):
        raise ConfigError(at, f"must be {'an integer' if integer else 'a number'}, got {_given(given, echo)}")
    if key.minimum is not None and not given >= key.minimum:  # written so that NaN fails it too
        raise ConfigError(at, f"must be >= {key.minimum:g}{got}")
    if key.maximum is not None and given > key.maximum:
        raise ConfigError(at, f"must be <= {key.maximum:g}{got}")
    if key.positive and (not given > 0 or (key.finite and not math.isfinite(given))):  # NaN too
        if echo:
            raise ConfigError(at, key.positive.format(value=given))
        raise ConfigError(at, "must be a positive, finite number" if key.finite else "must be a positive number")
    return given if key.per is None else float(given) / key.per


# A name of a key that no key could be (no digits, no capitals): said even where values are not.
_PLAIN_NAME = re.compile(r"[a-z_]{1,64}")


def only(raw: dict, where: str, allowed: Set[str], echo: bool = True) -> None:
    """Refuse a key `allowed` does not hold, naming it and what is allowed (without `echo`,
    named only when its name could not be a key written as one: `sk-...` = true)."""
    for name in raw:
        if name not in allowed:
            if not echo and not _PLAIN_NAME.fullmatch(name):
                raise ConfigError(where or "the file", f"a key that is not one of its keys, not named here as it "
                                                       f"could be a secret (allowed: {', '.join(sorted(allowed))})")
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
