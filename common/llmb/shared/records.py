"""Records llmb wrote and reads back, checked against their type and a size bound before use.

llmb keeps state in JSON files it wrote itself (the history's lines, a suite's suite.json, a
screen's screen.json and its tasks' files, the newest preflight report, an archive's
ARCHIVE.json and analysis.json). Nothing guarantees they are still what llmb wrote: a hand
edit, a careless colleague on a shared file system, a crafted archive. Each record kind is a
TypedDict in the module that owns it; `check(Kind, data)` holds a parsed value to it, field by
field, before a single field is used:

- each field of the TypedDict has its type: text, a whole number (never a boolean, within
  +-MAX_WHOLE: arithmetic on it cannot overflow), a finite number, true/false, a Literal's
  values, a list or mapping of its item type (a TypedDict too: `list[Node]`,
  `dict[str, Entry]`), a nested TypedDict at any depth, or null where it says so; a required
  key is present;
- every text, list and mapping is bounded (MAX_TEXT characters, MAX_ITEMS entries), also
  under `Any` or `object` (a value of any JSON type, which its reader narrows) and in keys
  the TypedDict does not name (a record may carry more than a reader uses); an annotation
  can set its own bound: `Annotated[list[Node], Bound(items=4096)]`, and a number's
  `Annotated[float, Bound(number=1e9)]` (its magnitude at most that: what is drawn and
  divided stays in a sane range).

A value that does not fit raises BadRecord: `field` (a path such as `nodes[3].gpus[0].name`)
and `problem`, one line (`nodes[3].node is 5 (a whole number), not text`) that shows at most a
short prefix of the value and its size, never the whole of it. The caller names the file and
what to do. Each kind is compiled once into plain checks (the history's records are checked
one by one as a status reads them). Standard library only.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, Union

from llmb.shared.errors import LlmbError
from llmb.shared.values import brief, shown

MAX_TEXT = 1 << 16  # characters of one text
MAX_ITEMS = 100_000  # entries of one list or mapping
MAX_KEY = 4096  # characters of a mapping's key (a path in an archive's index)
MAX_WHOLE = 10**15  # a count, a byte size or a time in seconds; never near a float's range
MAX_DEPTH = 64  # levels of lists and mappings under Any

K = TypeVar("K")
Checker = Callable[[Any], None]


@dataclass(frozen=True)
class Bound:
    """A field's own bound, in its annotation: `Annotated[str, Bound(text=256)]`."""

    text: int | None = None
    items: int | None = None
    number: float | None = None  # the most a number's magnitude may be


class BadRecord(LlmbError):
    """A record that is not of its type: `field` where, `problem` one line saying what."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(problem)
        self.field = field
        self.problem = problem


class _Bad(Exception):
    """Raised deep inside a check; each container on the way out adds its key to `parts`."""

    def __init__(self, value: Any, detail: str, missing: str | None = None) -> None:
        super().__init__(detail)
        self.value, self.detail, self.missing = value, detail, missing
        self.parts: list[str | int] = []

    def record(self) -> BadRecord:
        path = ""
        for part in reversed(self.parts):
            path = f"{path}[{part}]" if isinstance(part, int) else \
                (f"{path}.{brief(part, 40)}" if path else brief(part, 40))
        where = path or "the record"
        if self.missing is not None:
            return BadRecord(f"{path}.{self.missing}".lstrip("."),
                             f"{where} has no {self.missing}")
        return BadRecord(path, f"{where} is {described(self.value)}, {self.detail}")


def described(value: Any) -> str:
    """A value for a message: a short prefix and its size, never all of a long one."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (true or false)"
    if isinstance(value, int):
        if abs(value) < 10**20:
            return f"{value} (a whole number)"
        return f"a whole number of about {int(value.bit_length() * 0.30103) + 1} digits"
    if isinstance(value, float):
        return f"{value!r} (a number)"
    if isinstance(value, str):
        return f"'{shown(value)}' (text)" if len(value) <= 40 else \
            f"'{shown(value[:40])}...' (text of {len(value)} characters)"
    if isinstance(value, list):
        return f"a list of {len(value)} item(s)"
    if isinstance(value, dict):
        return f"a mapping of {len(value)} key(s)"
    return type(value).__name__


# --- compiling a type into checks ---------------------------------------------------------------

def _unwrap(tp: Any) -> tuple[Any, Bound]:
    """(the bare type, its Bound) of an annotation."""
    bound = Bound()
    if typing.get_origin(tp) is typing.Annotated:
        for extra in tp.__metadata__:
            if isinstance(extra, Bound):
                bound = extra
        tp = tp.__origin__
    return tp, bound


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def _name(tp: Any) -> str:
    """What a type is called in a message."""
    tp, _ = _unwrap(tp)
    origin = typing.get_origin(tp)
    if tp is type(None) or tp is None:
        return "null"
    if tp is Any or tp is object:
        return "a value"
    if origin in (Union, types.UnionType):
        return " or ".join(dict.fromkeys(_name(a) for a in typing.get_args(tp)))
    if origin is Literal:
        return "one of " + ", ".join(map(str, typing.get_args(tp)))
    if origin is list or tp is list:
        return "a list"
    if origin is dict or tp is dict or _is_typeddict(tp):
        return "a mapping"
    return {str: "text", int: "a whole number", float: "a number", bool: "true or false"
            }.get(tp, getattr(tp, "__name__", str(tp)))


def _fits(tp: Any) -> Callable[[Any], bool]:
    """Whether a value is the kind of thing the annotation asks for, its content aside."""
    tp, _ = _unwrap(tp)
    origin = typing.get_origin(tp) or tp
    if tp is Any or tp is object:
        return lambda v: True
    if tp is type(None) or tp is None:
        return lambda v: v is None
    if origin is Literal:
        allowed = typing.get_args(tp)
        return lambda v: any(type(v) is type(a) and v == a for a in allowed)
    if origin is list:
        return lambda v: type(v) is list
    if origin is dict or _is_typeddict(tp):
        return lambda v: type(v) is dict
    if tp is float:
        return lambda v: type(v) in (int, float)
    return lambda v: type(v) is tp  # str, int, bool: a bool is never a whole number


_COMPILED: dict[Any, Checker] = {}


def _compiled(tp: Any) -> Checker:
    if tp not in _COMPILED:
        _COMPILED[tp] = _compile(tp)
    return _COMPILED[tp]


def _compile(annotation: Any) -> Checker:
    tp, bound = _unwrap(annotation)
    origin = typing.get_origin(tp) or tp
    if tp is Any or tp is object:
        return _any
    if origin in (Union, types.UnionType):
        return _union(tp)
    if _is_typeddict(tp):
        return _record(tp)
    if origin is list:
        return _list(tp, bound)
    if origin is dict:
        return _dict(tp, bound)
    if tp is type(None) or tp is None or origin is Literal or tp in (str, int, float, bool):
        return _scalar(tp, bound)
    raise TypeError(f"records cannot check {tp!r}")  # a programming error, not a bad record


def _scalar(tp: Any, bound: Bound) -> Checker:
    fits, expected = _fits(tp), f"not {_name(tp)}"
    limit = bound.text or MAX_TEXT
    most = bound.number

    def check(value: Any) -> None:
        if not fits(value):
            raise _Bad(value, expected)
        if type(value) is str and len(value) > limit:
            raise _Bad(value, f"longer than the {limit} characters it can be")
        if type(value) is int and abs(value) > MAX_WHOLE:
            raise _Bad(value, f"beyond the {MAX_WHOLE} it can be")
        if type(value) is float and not math.isfinite(value):
            raise _Bad(value, "not a finite number")
        if most is not None and type(value) in (int, float) and abs(value) > most:
            raise _Bad(value, f"beyond the {most:g} it can be")
    return check


def _union(tp: Any) -> Checker:
    """The first option whose kind of value this is (text, a list, a mapping, ...) decides."""
    options = [(_fits(a), _compiled(a)) for a in typing.get_args(tp)]
    expected = f"not {_name(tp)}"

    def check(value: Any) -> None:
        for fits, sub in options:
            if fits(value):
                sub(value)
                return
        raise _Bad(value, expected)
    return check


def _sized(value: Any, limit: int) -> None:
    if len(value) > limit:
        raise _Bad(value, f"more than the {limit} it can hold")


def _list(tp: Any, bound: Bound) -> Checker:
    (item,) = typing.get_args(tp) or (Any,)
    sub = _compiled(item)
    limit = bound.items or MAX_ITEMS

    def check(value: Any) -> None:
        if type(value) is not list:
            raise _Bad(value, "not a list")
        _sized(value, limit)
        for i, entry in enumerate(value):
            try:
                sub(entry)
            except _Bad as exc:
                exc.parts.append(i)
                raise
    return check


def _dict(tp: Any, bound: Bound) -> Checker:
    key_tp, item = typing.get_args(tp) or (str, Any)
    key_check, sub = _compiled(key_tp), _compiled(item)
    limit = bound.items or MAX_ITEMS

    def check(value: Any) -> None:
        if type(value) is not dict:
            raise _Bad(value, "not a mapping")
        _sized(value, limit)
        for key, entry in value.items():
            try:
                key_check(key)
                if type(key) is str and len(key) > MAX_KEY:
                    raise _Bad(key, f"a key longer than the {MAX_KEY} characters it can be")
                sub(entry)
            except _Bad as exc:
                exc.parts.append(key)
                raise
    return check


def _record(kind: Any) -> Checker:
    hints = typing.get_type_hints(kind, include_extras=True)
    required = sorted(kind.__required_keys__)
    fields: dict[str, Checker] = {}

    def check(value: Any) -> None:
        if not fields:  # compiled on first use: a kind may name itself
            fields.update({k: _compiled(t) for k, t in hints.items()})
        if type(value) is not dict:
            raise _Bad(value, "not a mapping")
        _sized(value, MAX_ITEMS)
        for key in required:
            if key not in value:
                raise _Bad(value, "", missing=key)
        for key, entry in value.items():
            try:
                if type(key) is not str or len(key) > MAX_KEY:
                    raise _Bad(key, "not a key of this record")
                fields.get(key, _any)(entry)
            except _Bad as exc:
                exc.parts.append(key)
                raise
    return check


def _any(value: Any) -> None:
    """A value of any JSON type, bounded: its texts, lists, mappings and depth; without
    recursion."""
    stack: list[tuple[Any, list[str | int], int]] = [(value, [], 0)]
    while stack:
        item, parts, level = stack.pop()
        kind = type(item)
        problem = None
        if kind is str:
            if len(item) > MAX_TEXT:
                problem = f"longer than the {MAX_TEXT} characters it can be"
        elif kind is float:
            if not math.isfinite(item):
                problem = "not a finite number"
        elif kind in (list, dict):
            if len(item) > MAX_ITEMS:
                problem = f"more than the {MAX_ITEMS} it can hold"
            elif level >= MAX_DEPTH:
                problem = f"nested deeper than {MAX_DEPTH} levels"
            elif kind is dict and any(len(str(k)) > MAX_KEY for k in item):
                problem = f"a mapping with a key longer than {MAX_KEY} characters"
            else:
                pairs = item.items() if kind is dict else enumerate(item)
                stack.extend((sub, [*parts, key], level + 1) for key, sub in pairs)
        if problem is not None:
            exc = _Bad(item, problem)
            exc.parts = list(reversed(parts))
            raise exc


def check(kind: type[K], data: Any) -> K:
    """data, when it is a record of this TypedDict kind within its bounds; else BadRecord."""
    try:
        _compiled(kind)(data)
    except _Bad as exc:
        raise exc.record() from None
    return typing.cast(K, data)


def problem(kind: Any, data: Any) -> str | None:
    """Why data is not a record of this kind (one line), or None."""
    try:
        _compiled(kind)(data)
    except _Bad as exc:
        return exc.record().problem
    return None
