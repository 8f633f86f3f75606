"""Secrets: which names hold one, which values are one, and how to keep them out of text.

A secret (a Hugging Face token, a Run:ai application secret, a password in an `env:` entry) must
never reach output, a history record, an archive or a world-readable file. Two tests, used
together: by name (a variable called *TOKEN*, *SECRET*, *PASSWD*, *CREDENTIAL*, ...), and by
value (the values of such variables are masked wherever they appear, whatever the text calls
them). Values shorter than MIN_VALUE_LEN are not masked by value: `HF_TOKEN=true` must not turn
every "true" into stars (the fronts refuse such a token up front).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

MASK = "********"
MIN_VALUE_LEN = 8
# Matched anywhere in the upper-cased name.
_SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASS(?:WORD|WD|PHRASE)?|PASSWD|PWD|CREDENTIAL|PRIVATE|AUTH|COOKIE|KEY|"
    r"SESSION|SIGNATURE|CERT")
# Common variables whose names match but which hold no secret.
_NOT_SECRET = {"PWD", "OLDPWD", "SSH_AUTH_SOCK", "KEYTIMEOUT"}


def is_secret_name(name: str) -> bool:
    """True when a variable or key of this name may hold a secret."""
    upper = str(name).upper()
    return upper not in _NOT_SECRET and _SECRET_NAME.search(upper) is not None


def secret_values(environ: Mapping[str, str] | None = None,
                  extra: Iterable[str | None] = ()) -> set[str]:
    """The values to mask: those of secret-named variables in environ, plus `extra`, each
    stripped and at least MIN_VALUE_LEN characters long."""
    found = [v for k, v in (environ or {}).items() if is_secret_name(k)]
    found.extend(v for v in extra if v)
    return {v.strip() for v in found
            if isinstance(v, str) and len(v.strip()) >= MIN_VALUE_LEN}


def redact(text: str, values: Iterable[str]) -> str:
    """text with every occurrence of each value replaced by MASK (longest values first)."""
    for value in sorted(set(values), key=len, reverse=True):
        if value:
            text = text.replace(value, MASK)
    return text


def public_env(env: Mapping[str, object], values: Iterable[str] = ()) -> dict[str, str]:
    """env without its secret-named entries, and with known secret values masked in the rest."""
    known = set(values)
    return {str(k): redact(str(v), known) for k, v in env.items() if not is_secret_name(str(k))}
