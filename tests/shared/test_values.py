"""llmb.shared.values: the one boolean parser and the control-character refusal every front uses."""

from __future__ import annotations

import pytest
from llmb.shared import values


@pytest.mark.parametrize("text", ["true", "TRUE", " yes ", "Y", "1", "on", "On"])
def test_true_spellings(text: str) -> None:
    assert values.parse_bool("X", text) is True


@pytest.mark.parametrize("text", ["false", "False", "no", "N", "0", "off", " OFF "])
def test_false_spellings(text: str) -> None:
    assert values.parse_bool("X", text) is False


def test_yaml_booleans_pass_through() -> None:
    assert values.parse_bool("profile", True) is True
    assert values.parse_bool("profile", False) is False


def test_a_quoted_false_is_false_not_a_true_string() -> None:
    # bool("false") is True: the defect this parser exists to prevent.
    assert values.parse_bool("profile", "false") is False


def test_blank_is_the_callers_choice() -> None:
    assert values.parse_bool("X", "") is False
    assert values.parse_bool("X", "  ", empty=True) is True
    with pytest.raises(values.BadValue, match=r"^X= is not a boolean"):
        values.parse_bool("X", "", empty=None)


@pytest.mark.parametrize("bad", ["maybe", "2", "truee", 2, 1.0, None, ["true"], {"a": 1}])
def test_anything_else_is_refused_in_one_line_naming_it(bad: object) -> None:
    with pytest.raises(values.BadValue) as err:
        values.parse_bool("SMOKE_TEST", bad)
    message = str(err.value)
    assert message.startswith("SMOKE_TEST=") and "\n" not in message
    assert "use true or false" in message


def test_control_characters_are_named_escaped() -> None:
    assert values.control_characters("acct\nx\x1b[31m") == ["\\n", "\\x1b"]
    assert values.control_characters("plain value / ok") == []
    assert values.control_characters("tab\there") == ["\\t"]
    assert values.control_characters("c1\x85") == ["\\x85"]


def test_require_printable_returns_the_value_or_refuses_in_one_line() -> None:
    assert values.require_printable("SBATCH_ACCOUNT", "acct-1") == "acct-1"
    with pytest.raises(values.BadValue) as err:
        values.require_printable("SBATCH_ACCOUNT", "acct\n#SBATCH --uid=0")
    message = str(err.value)
    assert "\n" not in message
    assert message == ("SBATCH_ACCOUNT=acct\\n#SBATCH --uid=0 contains control character(s) "
                       "\\n; remove them")


def test_shown_keeps_printable_text_and_non_ascii() -> None:
    assert values.shown("naïve ok") == "naïve ok"
    assert values.shown("a\rb\x00") == "a\\rb\\x00"
    assert values.shown("\udcff") == "\\udcff"


def test_a_long_value_is_shown_as_its_prefix_and_its_length() -> None:
    huge = "h" * 3_000_000
    assert values.shown(huge) == "h" * values.SHOWN_MAX + "... (3000000 characters)"
    assert values.brief(huge) == "h" * values.BRIEF + "... (3000000 characters)"
    assert values.brief("a\nb") == "a\\nb"
    assert values.brief(10**5000) == "<a whole number of about 5001 digits>"


@pytest.mark.parametrize("text", ["0", "42", "0007"])
def test_ascii_digits_takes_0_to_9(text: str) -> None:
    assert values.ascii_digits(text)


@pytest.mark.parametrize("text", ["", "4 2", "-1", "1.0", "\u00b2", "\u0661\u0660", "\uff11",
                                  "12\u00b3"])
def test_ascii_digits_refuses_other_digits_that_isdigit_takes(text: str) -> None:
    # '\u00b2'.isdigit() is True but int('\u00b2') raises: sinfo's node count, a GRES count or a
    # pid folder with one must read as "not a number", never crash
    assert not values.ascii_digits(text)
