"""How one launch.sh variable is read, whatever the cluster: the generic half of a request.

A blank variable is an unset one; a boolean is one of llmb.shared.values' spellings; a count is
written plainly (ASCII digits, no sign, no leading zero) and bounded; a choice is one of a list,
in any case. A refusal is a RequestError, the one line launch.sh prints. llmb.launch.request
(the rules every cluster type shares, and the request), llmb.launch.slurmvars and
llmb.launch.runaivars (each cluster's own variables) read their variables through these.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TypeVar

from llmb.shared import values
from llmb.shared.errors import UsageError
from llmb.shared.values import shown

_T = TypeVar("_T")
# The most of anything counted (steps, GPUs): a 23-digit MAX_STEPS is a typo, not a run.
MAX_COUNT = 1_000_000
MAX_GPUS_PER_NODE = 64


class RequestError(UsageError):
    """A bad launch request; str(error) is the one line shown to the user (without 'llmb: ')."""


def setting(env: Mapping[str, str], name: str) -> str | None:
    """The variable's value, stripped; None when it is unset or blank."""
    value = env.get(name)
    return None if value is None or value.strip() == "" else value.strip()


def parse_bool(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    """An unset variable is `default`, a blank one false (llmb.shared.values says what a boolean
    is)."""
    value = env.get(name)
    if value is None:
        return default
    try:
        return values.parse_bool(name, value)
    except values.BadValue as err:
        raise RequestError(str(err)) from None


def parse_positive_int(env: Mapping[str, str], name: str, default: int | None = None,
                       what: str = "a positive integer", maximum: int = MAX_COUNT) -> int:
    """A positive integer written plainly: ASCII digits, no sign, no leading zero (010 is
    not silently 10, nor 8), at most `maximum`."""
    value = setting(env, name)
    if value is None:
        if default is None:
            raise RequestError(f"{name} is not set; set it to {what}")
        return default
    if not re.fullmatch(r"[1-9][0-9]*", value):
        plain = re.fullmatch(r"\+?0*([1-9][0-9]*)", value)
        hint = f"; write it as {plain.group(1)}" if plain else ""
        raise RequestError(f"{name}={shown(value)} is not {what}{hint}")
    if len(value) > len(str(maximum)) or int(value) > maximum:
        raise RequestError(f"{name}={value} is too large; at most {maximum}")
    return int(value)


def checked(check: Callable[..., _T], *args: object) -> _T:
    """A llmb.shared.shellsafe check whose refusal becomes the one-line RequestError."""
    try:
        return check(*args)
    except values.BadValue as err:
        raise RequestError(str(err)) from None


def parse_choice(env: Mapping[str, str], name: str, default: str, allowed: list[str],
                 owner: str) -> str:
    given = setting(env, name) or default
    value = given.lower()  # (values are case-insensitive; a refusal quotes what was given)
    if value not in allowed:
        raise RequestError(f"{name}={shown(given)} is not supported by {owner}; "
                           f"allowed: {', '.join(allowed)}")
    return value
