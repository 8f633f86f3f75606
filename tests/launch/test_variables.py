"""llmb.launch.variables: how any launch variable is read (the request's cluster-independent
half), each refusal one RequestError line naming the variable and the value."""

from __future__ import annotations

import pytest
from llmb.launch import variables
from llmb.launch.variables import RequestError
from llmb.shared import shellsafe
from llmb.shared.errors import UsageError


def test_a_blank_variable_is_an_unset_one() -> None:
    env = {"A": "  ", "B": " 8 "}
    assert variables.setting(env, "A") is None and variables.setting(env, "missing") is None
    assert variables.setting(env, "B") == "8"


def test_booleans_default_when_unset_and_are_false_when_blank() -> None:
    assert variables.parse_bool({}, "DRY_RUN", default=True) is True
    assert variables.parse_bool({"DRY_RUN": ""}, "DRY_RUN", default=True) is False
    assert variables.parse_bool({"DRY_RUN": "Yes"}, "DRY_RUN") is True
    with pytest.raises(RequestError, match=r"^DRY_RUN=maybe is not a boolean"):
        variables.parse_bool({"DRY_RUN": "maybe"}, "DRY_RUN")


@pytest.mark.parametrize(("value", "message"), [
    ("010", "N=010 is not a positive integer; write it as 10"),
    ("+7", "N=+7 is not a positive integer; write it as 7"),
    ("0", "N=0 is not a positive integer"),
    ("\u0668", "N=\u0668 is not a positive integer"),
    ("65", "N=65 is too large; at most 64"),
    ("9" * 30, f"N={'9' * 30} is too large; at most 64"),
])
def test_counts_are_written_plainly_and_bounded(value: str, message: str) -> None:
    with pytest.raises(RequestError) as err:
        variables.parse_positive_int({"N": value}, "N", maximum=64)
    assert str(err.value) == message


def test_a_count_is_required_unless_it_has_a_default() -> None:
    assert variables.parse_positive_int({"N": "64"}, "N", maximum=64) == 64
    assert variables.parse_positive_int({}, "N", 50) == 50
    with pytest.raises(RequestError, match=r"^N is not set; set it to a positive integer$"):
        variables.parse_positive_int({}, "N")


def test_a_choice_is_one_of_the_list_in_any_case() -> None:
    assert variables.parse_choice({"DTYPE": "FP8"}, "DTYPE", "bf16", ["bf16", "fp8"], "x") == "fp8"
    assert variables.parse_choice({}, "DTYPE", "bf16", ["bf16", "fp8"], "x") == "bf16"
    with pytest.raises(RequestError, match=r"^DTYPE=fp16 is not supported by x; allowed: bf16"):
        variables.parse_choice({"DTYPE": "fp16"}, "DTYPE", "bf16", ["bf16", "fp8"], "x")


def test_a_shellsafe_refusal_becomes_a_request_error() -> None:
    with pytest.raises(RequestError, match=r"^TIME_LIMIT=30m is not a Slurm time") as err:
        variables.checked(shellsafe.slurm_time, "TIME_LIMIT", "30m")
    assert isinstance(err.value, UsageError) and err.value.status == 2
    assert variables.checked(shellsafe.slurm_time, "TIME_LIMIT", "00:30:00") is not None
