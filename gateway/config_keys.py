"""How a key of the gateway's TOML configuration is declared: once, as a typed field.

A `Key` is one key as its users read it and the parser checks it: its TOML name, its type,
its default, its bounds (minimum, maximum, positive, choices), its unit (`per`: a key in
milliseconds holds seconds) and its meaning. A key whose value lands in a dataclass field is
declared on that field (`key(...)` as the field's default, `declared(cls)` lists them), so the
field's default IS the key's default; a key that lands in no one field (a table, a key read
by a cross-key rule, a value of a lower room's type) is a `Key` of its own in its table.
`gateway.config` reads every table with these declarations (the unknown-key check, type and
bound errors, defaults) and `tools.gen_docs` writes the reference page from them.

It knows no TOML file, no parsing and nothing of the gateway: the scheduler's settings
(`gateway.batching.config`) declare their keys with it, below every floor that reads them.
"""
from __future__ import annotations

import dataclasses
import enum
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
