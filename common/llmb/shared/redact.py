"""Secrets: which names hold one, which values are one, and how to keep them out of text.

A secret (a Hugging Face token, a Run:ai application secret, a password in an `env:` entry) must
never reach output, a history record, an archive or a world-readable file. Two tests, used
together: by name (a variable called *TOKEN*, *SECRET*, *PASSWD*, *CREDENTIAL*, ...), and by
value (the values of such variables are masked wherever they appear, whatever the text calls
them). Values shorter than MIN_VALUE_LEN are not masked by value: `HF_TOKEN=true` must not turn
every "true" into stars (the fronts refuse such a token up front).

Free text (a log, a job script, a JSON or YAML file going into the results archive) gets
`redact_text`: known values, credential-shaped strings (Hugging Face, NGC, GitHub, AWS, Slack
tokens; a URL's password; an Authorization header) and the value of every secret-named
assignment (`HF_TOKEN=...`, `"app_secret": "..."`, `password: ...`) are masked; `clear_secrets`
says what would be (for checking an archive someone else made).
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterable, Mapping

MASK = "********"
MIN_VALUE_LEN = 8
# Matched anywhere in the upper-cased name.
_SECRET_NAME = re.compile(
    r"TOKEN(?!IZ)|SECRET|PASS(?:WORD|WD|PHRASE)?|PASSWD|PWD|CREDENTIAL|PRIVATE|AUTH|COOKIE|KEY|"
    r"SESSION|SIGNATURE|CERT")
# TOKENIZER (TOKENIZERS_PARALLELISM, a tokenizer's name) is no secret. Common variables whose
# names match but which hold no secret:
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


# --- secrets in free text (logs, job scripts, JSON/YAML), for the results archive ------------

# Strings shaped like a credential, whatever the text calls them: each its literal start (a
# word's start), then the rest. The literal is what a text must hold for the expression to
# find anything in it (_may_hold_token).
_TOKEN_FORMS = (
    ("hf_", r"[A-Za-z0-9]{20,}\b"),  # Hugging Face access token
    ("nvapi-", r"[A-Za-z0-9_-]{20,}"),  # NGC / build.nvidia.com API key
    ("gh", r"[pousr]_[A-Za-z0-9]{30,}\b"), ("github_pat_", r"[A-Za-z0-9_]{30,}\b"),  # GitHub
    ("AKIA", r"[0-9A-Z]{16}\b"), ("ASIA", r"[0-9A-Z]{16}\b"),  # AWS access key id
    ("xox", r"[abprs]-[A-Za-z0-9-]{10,}"),  # Slack token
)
_TOKEN_SHAPES = re.compile("|".join(r"\b" + re.escape(literal) + rest
                                    for literal, rest in _TOKEN_FORMS))
# user:password@ in a URL; an Authorization header's credentials.
# Every repetition is bounded (a URL scheme, a user name, a variable name): on a log line that is
# one long run of letters and digits an unbounded one was tried from every position, quadratic
# time (64 kB: 10 s).
_URL_PASSWORD = re.compile(r"(?P<keep>(?<![a-z0-9+.-])[a-z][a-z0-9+.-]{0,31}://[^/\s:@]{1,256}:)"
                           r"(?P<secret>[^/\s@]{1,512})(?=@)", re.I)
_AUTH_HEADER = re.compile(r"(?P<keep>\bauthorization\s*[:=]\s*[\"']?(?:bearer|basic|token)\s+)"
                          r"(?P<secret>[^\s\"',;]+)", re.I)
# NAME=value, NAME: value, "name": "value", name = 'value' (shell, env, YAML, JSON, INI).
_ASSIGNMENT = re.compile(
    r"""(?<![\w.])(?P<name>[A-Za-z_][\w.-]{0,127})(?P<sep>["']?[ \t]*[=:][ \t]*)"""
    r"""(?P<value>"(?:[^"\\\n]|\\.)*"|'[^'\n]*'|[^\s"',;|{}\[\]]+)""")
# Values of a secret-named key that are not a secret: empty, a boolean, null, a number, a
# shell reference, an Authorization header's scheme, the mask itself.
_HARMLESS = re.compile(r"(?:|true|false|yes|no|on|off|null|none|nil|bearer|basic|"
                       r"[-+]?[0-9][0-9.e+-]*|\$\{?\w+\}?|" + re.escape(MASK) + r")", re.I)


_ANY_SECRET_NAME = re.compile(_SECRET_NAME.pattern, re.I)  # cheap test before the assignments
# What each expression cannot match without: a form's literal of _TOKEN_SHAPES, the
# scheme's `://` of _URL_PASSWORD, the header's name of _AUTH_HEADER. A substitution that finds
# nothing still tries every position of the text (several microseconds for a line: the analyzer
# masks a reason per log); a substring search is a fraction of that.
_AUTH_NAME = re.compile("authorization", re.I)  # (as _AUTH_HEADER matches it: ı is an i)


def _may_hold_token(text: str) -> bool:
    return any(literal in text for literal, _ in _TOKEN_FORMS)


def _may_hold_header(text: str) -> bool:
    # ASCII text: its lower case is what re.I compares (the expression for any other)
    return ("authorization" in text.lower() if text.isascii()
            else _AUTH_NAME.search(text) is not None)


def _mask_credentials(text: str) -> str:
    """text with credential-shaped strings, a URL's password and an Authorization header's
    credentials masked."""
    if _may_hold_token(text):
        text = _TOKEN_SHAPES.sub(MASK, text)
    if "://" in text:
        text = _URL_PASSWORD.sub(lambda m: m.group("keep") + MASK, text)
    if _may_hold_header(text):
        text = _AUTH_HEADER.sub(lambda m: m.group("keep") + MASK, text)
    return text


def _secret_assignment(m: re.Match[str]) -> bool:
    value = m.group("value")
    inner = value[1:-1] if value[:1] in "\"'" and len(value) > 1 else value
    return is_secret_name(m.group("name")) and not _HARMLESS.fullmatch(inner.strip())


def redact_text(text: str, values: Iterable[str] = ()) -> str:
    """text with every known secret value (`redact`), every credential-shaped string and the
    value of every secret-named assignment masked. Quotes and separators are kept, so JSON
    stays JSON and a job script stays a job script."""
    text = _mask_credentials(redact(text, values))
    if not _ANY_SECRET_NAME.search(text):
        return text

    def mask(m: re.Match[str]) -> str:
        if not _secret_assignment(m):
            return m.group(0)
        value = m.group("value")
        quote = value[0] if value[0] in "\"'" else ""
        return f"{m.group('name')}{m.group('sep')}{quote}{MASK}{quote}"

    return _ASSIGNMENT.sub(mask, text)


def looks_like_token(text: str) -> bool:
    """Whether text holds a string shaped like a credential (a Hugging Face, NGC, GitHub, AWS
    or Slack token): an answer or a field that should name a file, and holds a token."""
    return _TOKEN_SHAPES.search(text) is not None


def for_people(text: str, environ: Mapping[str, str] | None = None,
               values: Collection[str] | None = None) -> str:
    """A message for a terminal or a log, every secret in it masked: the values of this
    environment's secret-named variables (HF_TOKEN, ...), credential-shaped strings, a URL's
    password, an Authorization header's credentials. Every front prints its refusals through
    it: a token typed where a file was asked, or a token file given as a config, is never
    echoed. (Unlike redact_text it keeps `NAME=value` assignments: a message names settings.)
    values: the environment's secret values, when the caller took them once (secret_values:
    going through the environment costs more than the rest, for a caller with many messages)."""
    if values is None:
        values = secret_values(os.environ if environ is None else environ)
    return _mask_credentials(redact(text, values))


def clear_secrets(text: str) -> list[str]:
    """What `redact_text` would mask in text, named (never the value): the names of
    secret-named assignments in clear, and the kinds of credential-shaped strings."""
    found = [m.group("name") for m in _ASSIGNMENT.finditer(text) if _secret_assignment(m)] \
        if _ANY_SECRET_NAME.search(text) else []
    if _TOKEN_SHAPES.search(text):
        found.append("a token-shaped string")
    if any(m.group("secret") != MASK for pattern in (_URL_PASSWORD, _AUTH_HEADER)
           for m in pattern.finditer(text)):
        found.append("a password in a URL or an Authorization header")
    return found
