"""How a key of the gateway's TOML configuration is declared, once, as a typed field, and
the one reader that checks a table by its declarations.

A `Key` is one key as its users read it and the parser checks it: its TOML name, its type,
its default, its bounds (minimum, maximum, positive, choices), its unit (`per`: a key in
milliseconds holds seconds) and its meaning. A key whose value lands in a dataclass field is
declared on that field (`key(...)` as the field's default, `declared(cls)` lists them), so the
field's default IS the key's default; a key that lands in no one field (a table, a key read
by a cross-key rule, a value of a lower room's type) is a `Key` of its own in its table.
`tools.gen_docs` writes the reference page from them.

`read` checks a table by them (the unknown-key check, type and bound errors, defaults), the
same way and with the same messages for every table. Every problem is a ConfigError naming the
key as a user finds it in the file (`models[0].batching.max_batch_size`) and what is wrong
with it, with the value given; a table whose values may be a key pasted in the wrong field
(`Table.echo` False: the tenants') is told what is wrong without the value, and an unknown key
of it is named only when its name could not be one.

It knows no TOML file and nothing of what a table means (the rules between keys are their
table's own): the scheduler's settings (`gateway.batching.config`) and the model kinds'
tables (`gateway.kinds`) declare their keys with it, below every floor that reads them.
"""
from __future__ import annotations

import dataclasses
import enum
import math
import os
import re
from collections.abc import Set
from dataclasses import dataclass
from typing import Any


class Kind(enum.Enum):
    """A key's type, as the reference page shows it. The four scalars are read by the
    config's one reader; the others by their table's own function."""
    STRING = "string"
    INTEGER = "integer"
    NUMBER = "number"
    BOOLEAN = "boolean"
    TABLE = "table"
    TABLES = "array of tables"
    INTEGERS = "array of integers"
    STRINGS = "array of strings"
    INTEGER_OR_AUTO = 'integer or "auto"'
    STRING_OR_ARRAY = "string or array"
    NUMBER_OR_BOOLEAN = "number or boolean"


SCALARS = frozenset({Kind.STRING, Kind.INTEGER, Kind.NUMBER, Kind.BOOLEAN})


@dataclass(frozen=True, slots=True)
class Key:
    name: str                  # as TOML spells it
    kind: Kind
    meaning: str
    default: Any = None        # in the key's own unit (None: unset, or required)
    shown: str | None = None   # the default as the page says it when no value says it ("the model's name")
    required: bool = False
    minimum: float | None = None
    maximum: float | None = None
    positive: str = ""         # when set, a value not > 0 is refused with this problem ({value} is the value)
    finite: bool = False       # with positive: infinity is refused too
    choices: tuple[str, ...] = ()
    per: float | None = None   # the value held is float(value) / per (milliseconds to seconds: 1000)
    file: bool = False         # a string naming a file that must exist
    apart: bool = False        # a scalar read by its table's own function (its rule spans keys)
    field: str = ""            # the dataclass field it lands in ("": the key's name)
    within: str = ""           # declared on a field: the sub-table of the dataclass's table it sits in

    @property
    def value(self) -> Any:
        """The default as the field holds it (in seconds for a key in milliseconds)."""
        return self.default if self.per is None or self.default is None else float(self.default) / self.per

    @property
    def read(self) -> bool:
        """Whether the config's one reader reads it (else its table's own function does)."""
        return self.kind in SCALARS and not self.apart

    @property
    def default_text(self) -> str:
        """The default as a user reads it on the reference page ("" when there is none)."""
        if self.shown is not None:
            return self.shown
        default = self.default
        if default is None:
            return ""
        if isinstance(default, bool):
            return "true" if default else "false"
        if isinstance(default, float):
            return f"{default:g}"
        if isinstance(default, tuple):
            return str(list(default))
        return str(default)


_KEY = "gateway.config_keys"  # where a field's Key is kept in its metadata


def key(kind: Kind, default: Any, meaning: str, *, name: str = "", shown: str | None = None,
        minimum: float | None = None, maximum: float | None = None, positive: str = "", finite: bool = False,
        choices: tuple[str, ...] = (), per: float | None = None, file: bool = False, apart: bool = False,
        within: str = "") -> Any:
    """A dataclass field that is a config key: `default` in the key's own unit (the field
    holds `Key.value`), the rest as `Key` says. The key's name is the field's unless `name`
    is given. Typed Any so that it stands where the field's default goes."""
    declared = Key(name, kind, meaning, default, shown=shown, minimum=minimum, maximum=maximum, positive=positive,
                   finite=finite, choices=choices, per=per, file=file, apart=apart, within=within)
    return dataclasses.field(default=declared.value, metadata={_KEY: declared})


def declared(cls: type, within: str = "") -> tuple[Key, ...]:
    """The keys declared on `cls`'s fields (those of its sub-table `within`), in field order,
    each with its name and field filled in."""
    found = []
    for item in dataclasses.fields(cls):
        declaration = item.metadata.get(_KEY)
        if declaration is not None and declaration.within == within:
            found.append(dataclasses.replace(declaration, name=declaration.name or item.name, field=item.name))
    return tuple(found)


def default_of(cls: type, name: str) -> Any:
    """The default of `cls`'s field `name`: for a key whose value is of a type that knows no
    config (a lower room's), so that the default stays written once, where the type is."""
    (item,) = [item for item in dataclasses.fields(cls) if item.name == name]
    if item.default is dataclasses.MISSING:
        raise TypeError(f"{cls.__name__}.{name} has no default")
    return item.default


@dataclass(frozen=True, slots=True)
class Table:
    """One TOML table's keys: `path` says where it sits ("models[].batching"), `title` how
    the reference page heads it ("[models.batching]"). `echo` False: any of its values may be
    a secret written in the wrong key (a tenant's key), so its errors never repeat a value."""
    path: str
    title: str
    keys: tuple[Key, ...]
    echo: bool = True

    def names(self) -> frozenset[str]:
        return frozenset(key.name for key in self.keys)

    def __getitem__(self, name: str) -> Key:
        (found,) = [key for key in self.keys if key.name == name]
        return found


# -- the one reader ---------------------------------------------------------------------

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
