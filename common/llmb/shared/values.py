"""Values people type (environment variables, flags, YAML fields): strict parsing, shown safely.

Every front of llmb (launch.sh, the installer, llmb-run, bulk files, the analyzer) reads values
from people; this module is the one place that says what a boolean is and which characters a
value may not carry, so that the fronts agree and each refusal is one line naming the value.
Standard library only: it sits on the fast validation path.
"""

from __future__ import annotations

import re

from llmb.shared.errors import UsageError

# Boolean spellings, compared case-insensitively after stripping blanks.
TRUE = ("true", "yes", "y", "1", "on")
FALSE = ("false", "no", "n", "0", "off")
BOOL_HINT = "use true or false (also yes/no, 1/0, on/off)"

# C0 controls, DEL and C1 controls: never part of a name, path, account or image reference.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# What `shown()` escapes: controls, lone surrogates (undecodable bytes of a file name).
_UNPRINTABLE = re.compile(r"[^\x20-\x7e\u00a0-\uffff]|[\ud800-\udfff]")


# The most of one value a message or a table shows: a longer one is its prefix and its length
# (a 3 MB gpu_type is never echoed whole).
SHOWN_MAX = 1024
BRIEF = 60  # a bad value named in a one-line refusal


class BadValue(UsageError):
    """A value that cannot be used; str(error) is one line for people (no program prefix)."""


def ascii_digits(text: str) -> bool:
    """True for a non-empty run of 0-9 only. str.isdigit() also takes other scripts' digits and
    superscripts ('\u0661', '\u00b2'), which int() then refuses or reads as another number."""
    return text.isascii() and text.isdigit()


def shown(value: object, limit: int = SHOWN_MAX) -> str:
    """A value as one printable line: control characters appear escaped (`\\n`, `\\x1b`);
    past `limit` characters, its prefix and its length (`abc... (3000000 characters)`)."""
    text = _text(value)
    cut = text[:limit]
    out = _UNPRINTABLE.sub(
        lambda m: m.group().encode("unicode_escape", "backslashreplace").decode("ascii"), cut)
    if len(text) <= limit:
        return out
    return f"{out}... ({len(text)} characters)"


def brief(value: object, limit: int = BRIEF) -> str:
    """shown(), cut to a short prefix: what a one-line refusal shows of a bad value."""
    return shown(value, limit)


def _text(value: object) -> str:
    try:
        return str(value)
    except ValueError:  # an integer of more digits than Python converts to text
        return f"<a whole number of about {int(value.bit_length() * 0.30103) + 1} digits>" \
            if isinstance(value, int) else f"<{type(value).__name__}>"


def parse_bool(name: str, value: object, empty: bool | None = False) -> bool:
    """A strict boolean: a YAML/JSON bool, or one of the spellings of TRUE/FALSE.

    `empty` is what a blank string means (None: a blank string is refused). Anything else,
    `"maybe"`, `2`, a list, raises BadValue naming `name` and the value.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        low = value.strip().lower()
        if low in TRUE:
            return True
        if low in FALSE:
            return False
        if low == "" and empty is not None:
            return empty
    raise BadValue(f"{name}={shown(value)} is not a boolean; {BOOL_HINT}")


def control_characters(value: str) -> list[str]:
    """The control characters in value, escaped for a message ([] when there are none)."""
    return list(dict.fromkeys(shown(c) for c in _CONTROL.findall(value)))


def require_printable(name: str, value: str) -> str:
    """value unchanged, or BadValue when it holds a control character (a newline in an
    account name would add lines to a job script)."""
    found = control_characters(value)
    if found:
        raise BadValue(f"{name}={shown(value)} contains control character(s) "
                       f"{' '.join(found)}; remove them")
    return value
