"""YAML files people write (cluster_config.yaml, a bulk sweep, an installer config, a recipe's
metadata.yaml, gpus.yaml), read as data and nothing more.

`read_yaml(path, label, error)` reads a file someone can name (a regular file, bounded, UTF-8)
and parses it; every way it can be wrong is one line naming `label`, raised as `error`.
`load_yaml(text)` parses text already read. Both refuse what PyYAML would take but llmb should
not: a key given twice, collections nested deeper than MAX_DEPTH (before any parser sees them),
aliases that expand past MAX_EXPANDED values, and YAML 1.1's surprises in plain scalars (only
decimal numbers and true/false are read as such).
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from llmb.shared.errors import LlmbError
from llmb.shared.files import FileRefused, read_bounded

if TYPE_CHECKING:
    from yaml import Node
    from yaml.resolver import BaseResolver

# A YAML file people write (cluster_config.yaml, a bulk sweep, an installer config, a recipe's
# metadata.yaml) is a few KB; a larger one is not one of them.
MAX_YAML_BYTES = 4 << 20


_LOADER: list[Any] = []
# libyaml's parser recurses in C and crashes (a segmentation fault, no exception) on
# collections nested some 100000 deep (`[[[...`, or `- - - ...` on one line), PyYAML's
# pure-Python composer recurses too, and libyaml 0.2.6 (in PyYAML 6.0.4's wheels) stops flow
# nesting at 1000 levels with a scanner error of its own. No file people write nests deeper
# than MAX_DEPTH; so that the reader gets llmb's one line (TooDeep) whichever loader is
# installed, text long enough to nest deeper is checked before it is parsed. First its flow
# nesting (`[`, `{`) is counted on its characters: a scanner holds back the token of an
# opening bracket until it knows whether a key follows, so libyaml 0.2.6 stops at its 1000th
# bracket before the first token is out. Then its tokens are counted, which finds block
# nesting (a scanner keeps a counter, it does not recurse; the count stops at the first level
# too deep).
MAX_DEPTH = 200


class TooDeep(LlmbError):
    """Collections nested deeper than MAX_DEPTH."""


def _safe_loader() -> Any:
    """PyYAML's safe loader: libyaml's (several times faster) when PyYAML has it."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# What the flow count stops at: a bracket, a quote or a comment mark.
_FLOW_MARK = re.compile(r"""[\[\]{}'"#]""")
_QUOTED = {"'": re.compile(r"'[^']*(?:''[^']*)*'"),
           '"': re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)}
_BLANK = " \t\r\n\ufeff"


def _flow_too_deep(text: str) -> bool:
    """Whether YAML text opens flow collections more than MAX_DEPTH deep, counted on its
    characters, without a parser. Brackets in a quoted scalar or a comment do not count;
    outside every flow collection a bracket opens one only after a blank or at the start (not
    in a plain scalar such as `x[1]`). It is a count, not a parse: a text that misleads it (a
    quote that is an apostrophe, hundreds of ` [` left open in plain scalars) is still judged
    by the tokens after it."""
    depth, pos = 0, 0
    while match := _FLOW_MARK.search(text, pos):
        mark, at = match.group(), match.start()
        before = text[at - 1] if at else "\n"
        pos = at + 1
        starts_token = before in _BLANK or (depth > 0 and before in "[{,:")
        if mark == "#" and before in _BLANK:
            pos = text.find("\n", pos) + 1
            if pos == 0:
                return False
        elif mark in "'\"" and starts_token:
            quoted = _QUOTED[mark].match(text, at)
            pos = quoted.end() if quoted else pos
        elif mark in "[{" and starts_token:
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif mark in "]}" and depth:
            depth -= 1
    return False


# Aliases nested in aliases expand without bound (the "billion laughs": ten levels of ten aliases
# each are 10^10 values from a few hundred bytes), wherever the values are walked, copied or
# printed. A file whose values, every alias expanded, number more than this is refused before
# a single Python object is made of it (a recipe's metadata.yaml, with its few anchors, has
# some thousands).
MAX_EXPANDED = 1_000_000


class TooLarge(LlmbError):
    """YAML whose aliases expand to more than MAX_EXPANDED values, or refer to themselves."""


def _scan(text: str) -> bool:
    """Whether YAML text holds an alias (*name); TooDeep when it nests collections deeper
    than MAX_DEPTH: its flow nesting counted on its characters, then its tokens (a scanner
    keeps a counter, it does not recurse; libyaml's parser does, and crashes some 100000
    levels down)."""
    import yaml

    if len(text) > MAX_DEPTH and _flow_too_deep(text):
        raise TooDeep(f"collections nested more than {MAX_DEPTH} deep")
    depth, aliased = 0, False
    opens = (yaml.FlowSequenceStartToken, yaml.FlowMappingStartToken,
             yaml.BlockSequenceStartToken, yaml.BlockMappingStartToken)
    closes = (yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken, yaml.BlockEndToken)
    tokens = yaml.scan(text, Loader=_safe_loader())
    while True:
        try:
            token = next(tokens)
        except StopIteration:
            return aliased
        except yaml.MarkedYAMLError as exc:  # libyaml >= 0.2.6 stops at its own nesting limit
            if "maximum nesting depth" in (exc.problem or "") or "increasing" in str(exc):
                raise TooDeep(f"collections nested more than {MAX_DEPTH} deep") from None
            return aliased  # not YAML: the parser says where
        if isinstance(token, opens):
            depth += 1
            if depth > MAX_DEPTH:
                raise TooDeep(f"collections nested more than {MAX_DEPTH} deep")
        elif isinstance(token, closes):
            depth -= 1
        aliased = aliased or isinstance(token, yaml.AliasToken)


def _expanded(root: Node) -> int:
    """How many values a composed YAML document holds with every alias expanded (an alias
    is the very node of its anchor, so shared nodes count once per use); TooLarge past
    MAX_EXPANDED or for an alias inside its own anchor. Without recursion."""
    sizes: dict[int, int] = {}
    stack: list[tuple[Node, bool]] = [(root, False)]
    busy: set[int] = set()
    while stack:
        node, done = stack.pop()
        children = _children(node)
        if done:
            busy.discard(id(node))
            sizes[id(node)] = min(MAX_EXPANDED + 1, 1 + sum(sizes[id(c)] for c in children))
            continue
        if id(node) in sizes:
            continue
        if id(node) in busy:
            raise TooLarge("holds an alias inside its own anchor (a value that contains itself)")
        busy.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    if sizes[id(root)] > MAX_EXPANDED:
        raise TooLarge(f"expands, its aliases followed, to more than {MAX_EXPANDED} values (an "
                       "alias of aliases: the 'billion laughs'); write the values out")
    return sizes[id(root)]


def _children(node: Node) -> list[Node]:
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


# Plain scalars read as numbers and booleans: decimal numbers and true/false only (YAML 1.2's
# core schema, less its octal and hex). YAML 1.1, PyYAML's default, also reads 0x10 as 16, 010 as
# 8, 1_000 as 1000, 1:30:00 as 5400, yes/no/on/off as booleans and 2025-01-01 as a date: an
# account named 0x10 became 16, a time limit 1:30:00 became 5400 (minutes, to Slurm). Those stay
# the text written.
_RESOLVERS = (
    ("tag:yaml.org,2002:bool", r"true|True|TRUE|false|False|FALSE", "tTfF"),
    ("tag:yaml.org,2002:int", r"[-+]?(?:0|[1-9][0-9]*)", "-+0123456789"),
    ("tag:yaml.org,2002:float", r"[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
     r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)", "-+0123456789."),
    ("tag:yaml.org,2002:null", r"~|null|Null|NULL|", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:merge", r"<<", "<"),
)


def _plain_scalars(loader: type[BaseResolver]) -> None:
    """Give a loader class only _RESOLVERS for plain scalars."""
    loader.yaml_implicit_resolvers = {}
    for tag, pattern, first in _RESOLVERS:
        loader.add_implicit_resolver(tag, re.compile(f"^(?:{pattern})$"), list(first))


def _loader() -> Any:
    """yaml's safe loader (libyaml's parser when PyYAML has it) that refuses a key given twice
    in one mapping: YAML keeps the last value silently, so `env:` written twice would drop the
    first."""
    if not _LOADER:
        class UniqueKeys(_safe_loader()):  # type: ignore[misc]
            def construct_mapping(self, node: Any, deep: bool = False) -> Any:
                seen: dict[object, int] = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    line = key_node.start_mark.line + 1
                    try:
                        first = seen.get(key)
                    except TypeError:  # an unhashable key: the base class says so
                        break
                    if first is not None:
                        where = f"line {line}" if first == line else f"lines {first} and {line}"
                        raise DuplicateKey(f"the key {shown_key(key)} is given twice ({where}); "
                                           "keep one")
                    seen[key] = line
                return super().construct_mapping(node, deep)

        _plain_scalars(UniqueKeys)
        _LOADER.append(UniqueKeys)
    return _LOADER[0]


def shown_key(key: object) -> str:
    text = repr(key) if not isinstance(key, str) else key
    return text if len(text) <= 60 else text[:57] + "..."


class DuplicateKey(LlmbError):
    """A mapping that gives one key twice."""


def load_yaml(text: str) -> Any:
    """yaml.safe_load, through libyaml when PyYAML has it (several times faster), refusing a
    key given twice (DuplicateKey), collections nested deeper than MAX_DEPTH (TooDeep) and
    aliases that expand to more than MAX_EXPANDED values (TooLarge), before a Python object
    is made; numbers and booleans as _RESOLVERS reads them. PyYAML is imported here, on first
    use: the analyzer answers `--help` without it."""
    aliased = _scan(text) if len(text) > MAX_DEPTH or "*" in text else False
    loader = _loader()(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if aliased:
            _expanded(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_yaml(path: str | os.PathLike[str], label: str,
              error: type[LlmbError] = LlmbError) -> Any:
    """A YAML file people can name, parsed; else `error` with one line naming `label` (the
    file, or the option that named it): unreadable, not a regular file, too large, not UTF-8,
    not YAML, a key given twice, nested deeper or holding a number longer than Python reads."""
    import yaml

    try:
        raw = read_bounded(path, MAX_YAML_BYTES)
    except FileRefused as exc:
        if exc.reason.startswith("is larger"):
            raise error(f"{label} {exc.reason}; it cannot be a file llmb reads") from None
        why = exc.reason.removeprefix("cannot be read (").removesuffix(")")
        raise error(f"cannot read {label}: {why.removeprefix('is ')}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{label} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                    f"{exc.start}); save it as UTF-8") from None
    try:
        return load_yaml(text)
    except yaml.YAMLError as exc:
        raise error(f"{label} is not valid YAML: {str(exc).splitlines()[0]}") from None
    except (DuplicateKey, TooLarge) as exc:
        raise error(f"{label}: {exc}") from None
    except (RecursionError, TooDeep):
        raise error(f"{label} nests deeper than a file llmb reads can") from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise error(f"{label} holds a value llmb cannot read ({str(exc).split(';')[0]})"
                    ) from None
