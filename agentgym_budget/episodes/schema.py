"""Records read from disk, checked against the class that declares them: keys, types, ranges.

A results folder may come from someone else, and what it holds ends up in arithmetic and in an
HTML page (``agentgym-budget report``), so every record read back — a line of
``episodes.jsonl``, a transcript in ``transcripts.jsonl.gz``, ``passkt.json`` — goes through
:func:`checked`, called by that record's loader.  A record class is a dataclass whose type hints
say what each field holds; ranges are :class:`Bounds` in ``Annotated`` hints, and the aliases
below name the usual ones.  Checked: no unknown key, no missing field that has no default,
``bool`` is not an ``int`` (nor an ``int`` a ``bool``), numbers are finite and within their
bounds, lists and dicts hold what their hints say, nested record classes recursively (a field that
keeps a nested record as its plain ``dict`` says so with :class:`CheckedAs`).  Files are
parsed with :func:`parse_json`, which refuses ``NaN`` and ``Infinity`` (Python's ``json`` reads
them, no JSON standard has them).

Example:
    >>> @dataclass
    ... class Row:
    ...     task: Index
    ...     won_turn: Turn | None = None
    >>> checked(Row, {"task": 3})
    {'task': 3}
    >>> checked(Row, {"task": 3, "won_turn": "<img src=x>"})
    Traceback (most recent call last):
    ...
    agentgym_budget.episodes.schema.RecordError: won_turn: expected an integer in 1..1000000 or null, got the str '<img src=x>'
    >>> checked(Row, {"task": -1, "extra": 0})
    Traceback (most recent call last):
    ...
    agentgym_budget.episodes.schema.RecordError: unknown key 'extra' (expected task, won_turn)
"""

from __future__ import annotations

import dataclasses
import functools
import json
import keyword
import math
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from agentgym_budget.wrappers.budget_spec import MAX_BUDGET

__all__ = ["NOT_IN_FILE", "Bit", "Bounds", "CheckedAs", "Index", "Known", "NonNegative", "Positive", "RecordError", "Ternary",
           "Turn", "UnitInterval", "checked", "parse_json"]


class RecordError(ValueError):
    """A record read from disk is not what its class declares; the message names the field."""


@dataclass(frozen=True)
class Bounds:
    """The closed range a number must lie in (``None``: unbounded on that side)."""

    low: float | None = None
    high: float | None = None

    def __contains__(self, value: float) -> bool:
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)

    def text(self) -> str:
        if self.high is None:
            return f" >= {self.low}"
        return f" <= {self.high}" if self.low is None else f" in {self.low}..{self.high}"


@dataclass(frozen=True)
class CheckedAs:
    """``Annotated`` metadata of a field that keeps a nested record as its file's plain ``dict``: the
    hint says what the value is (``Annotated[dict[str, Any], CheckedAs(RunConfig)]``), ``record``
    the record class it is checked against."""

    record: type


Index = Annotated[int, Bounds(0)]  #: a task, attempt, seed or count: >= 0
Positive = Annotated[int, Bounds(1)]
Turn = Annotated[int, Bounds(1, MAX_BUDGET)]  #: a turn number or a budget
Known = Annotated[int, Bounds(-1)]  #: a length, -1 when unknown
Ternary = Annotated[int, Bounds(-1, 1)]  #: 1 yes, 0 no, -1 unknown
Bit = Annotated[int, Bounds(0, 1)]
NonNegative = Annotated[float, Bounds(0)]
UnitInterval = Annotated[float, Bounds(0, 1)]  #: a probability or fraction

#: Field metadata of a dataclass field that is never written to the record's file (refused when found there).
NOT_IN_FILE = {"in_file": False}


def parse_json(text: str | bytes) -> Any:
    """``json.loads``, refusing ``NaN``, ``Infinity`` and ``-Infinity`` (a :class:`RecordError`)."""
    return json.loads(text, parse_constant=_refuse_constant)


def _refuse_constant(name: str) -> Any:
    raise RecordError(f"{name} is not a number a record holds")


def checked(cls: type, data: Any) -> dict[str, Any]:
    """``data`` (a parsed JSON object) as the keyword arguments of dataclass ``cls``, each value
    checked against its field's type hint; anything else is a :class:`RecordError` naming the field.

    Fields missing from ``data`` that have a default are left out (the constructor fills them).
    A field named like a Python keyword plus ``_`` (``pass_``) reads the key without it (``pass``).
    """
    if not isinstance(data, dict):
        raise RecordError(f"expected a JSON object, got {_shown(data)}")
    fields = _fields_of(cls)
    unknown = [key for key in data if key not in fields]
    if unknown:
        raise RecordError(f"unknown key {str(unknown[0])[:40]!r} (expected {', '.join(fields)})")
    missing = [key for key, (_, _, required) in fields.items() if required and key not in data]
    if missing:
        raise RecordError(f"missing key {missing[0]!r}")
    return {fields[key][0]: _check(fields[key][1], value, key) for key, value in data.items()}


@functools.cache
def _fields_of(cls: type) -> dict[str, tuple[str, Any, bool]]:
    """``{key in the file: (field name, type hint, required)}`` of the dataclass ``cls``."""
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {}
    for f in dataclasses.fields(cls):
        if not f.init or f.metadata.get("in_file", True) is False:
            continue
        key = f.name[:-1] if f.name.endswith("_") and keyword.iskeyword(f.name[:-1]) else f.name
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        fields[key] = (f.name, hints[f.name], required)
    return fields


def _check(hint: Any, value: Any, path: str) -> Any:
    """``value`` if it is what ``hint`` declares (nested records checked as :func:`checked` does)."""
    if hint is Any:
        return value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        if isinstance(args[1], CheckedAs):
            return _check(args[1].record, value, path)
        return _check_bounded(args[0], args[1], value, path)
    if origin in (typing.Union, types.UnionType):
        return _check_union(hint, args, value, path)
    if origin is list or origin is tuple:
        if not isinstance(value, list):
            raise _wrong(hint, value, path)
        return _check_items(args[0], value, path)
    if origin is dict:
        if not isinstance(value, dict):
            raise _wrong(hint, value, path)
        return {key: _check(args[1], item, f"{path}.{key}") for key, item in value.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        try:
            return checked(hint, value)
        except RecordError as e:
            raise RecordError(f"{path}: {e}") from None
    if not _SCALARS[hint](value):
        raise _wrong(hint, value, path)
    return float(value) if hint is float else value


_SCALARS: dict[Any, Callable[[Any], bool]] = {
    bool: lambda v: isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and _finite(v),
    str: lambda v: isinstance(v, str),
    type(None): lambda v: v is None,
}


def _finite(number: int | float) -> bool:
    try:
        return math.isfinite(number)
    except OverflowError:  # an int too large for a float (a 400-digit "seconds") is no valid number
        return False


def _check_items(hint: Any, values: list[Any], path: str) -> list[Any]:
    if typing.get_origin(hint) is Annotated and typing.get_args(hint)[0] is int:
        # The per-turn lists of a long log: one pass over plain ints rather than a call per item.
        bounds = typing.get_args(hint)[1]
        if all(type(v) is int for v in values) and all(v in bounds for v in (min(values, default=0),
                                                                           max(values, default=0))):
            return values
    return [_check(hint, item, f"{path}[{i}]") for i, item in enumerate(values)]


def _check_bounded(base: Any, bounds: Bounds, value: Any, path: str) -> Any:
    if not _SCALARS[base](value) or value not in bounds:
        raise _wrong(Annotated[base, bounds], value, path)
    return float(value) if base is float else value


def _check_union(hint: Any, args: tuple[Any, ...], value: Any, path: str) -> Any:
    for arg in args:
        try:
            return _check(arg, value, path)
        except RecordError:
            continue
    raise _wrong(hint, value, path)


def _wrong(hint: Any, value: Any, path: str) -> RecordError:
    return RecordError(f"{path}: expected {_describe(hint)}, got {_shown(value)}")


def _describe(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        if isinstance(args[1], CheckedAs):
            return _describe(args[1].record)
        return _describe(args[0]) + args[1].text()
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in args)
    if origin in (list, tuple):
        return f"a list of ({_describe(args[0])})"
    if origin is dict:
        return f"an object of ({_describe(args[1])})"
    names = {bool: "true or false", int: "an integer", float: "a finite number", str: "a string",
             type(None): "null"}
    return names.get(hint, getattr(hint, "__name__", str(hint)))


def _shown(value: Any) -> str:
    text = repr(value)
    return f"the {type(value).__name__} " + (text if len(text) <= 60 else text[:50] + "...")
