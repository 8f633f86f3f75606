"""llmb.redact: secrets are kept out by name and by value, and a short value masks nothing."""

from __future__ import annotations

import pytest
from llmb import redact


@pytest.mark.parametrize("name", [
    "HF_TOKEN", "APP_SECRET", "MY_PASSWD", "DB_PASSWORD", "NGC_CREDENTIAL", "NGC_API_KEY",
    "wandb_api_key", "AWS_SECRET_ACCESS_KEY", "PRIVATE_KEY_FILE", "GH_AUTH", "SESSION_COOKIE",
    "MY_PASS",
])
def test_secret_names(name: str) -> None:
    assert redact.is_secret_name(name)


@pytest.mark.parametrize("name", ["PWD", "OLDPWD", "NCCL_DEBUG", "MAX_STEPS", "HOME",
                                  "SSH_AUTH_SOCK", "PATH"])
def test_ordinary_names(name: str) -> None:
    assert not redact.is_secret_name(name)


def test_secret_values_come_from_secret_names_and_extras_and_are_long_enough() -> None:
    env = {"HF_TOKEN": "hf_abcdefghijklmnop", "MY_PASSWD": " hunter2hunter2 ",
           "APP_SECRET": "true", "PATH": "/usr/bin:/bin"}
    found = redact.secret_values(env, extra=["runai-secret-xyz", None, "short"])
    assert found == {"hf_abcdefghijklmnop", "hunter2hunter2", "runai-secret-xyz"}


def test_redact_masks_every_occurrence_longest_first() -> None:
    text = "token=hf_abcdefghijklmnop url=https://x/?t=hf_abcdefghijklmnop_extra"
    out = redact.redact(text, {"hf_abcdefghijklmnop", "hf_abcdefghijklmnop_extra"})
    assert "hf_abc" not in out
    assert out == f"token={redact.MASK} url=https://x/?t={redact.MASK}"


def test_a_true_token_does_not_mask_every_true() -> None:
    values = redact.secret_values({"HF_TOKEN": "true"})
    assert redact.redact("profile: true", values) == "profile: true"


def test_public_env_drops_secret_names_and_masks_secret_values() -> None:
    env = {"NGC_CREDENTIAL": "nvapi-0123456789", "NCCL_DEBUG": "INFO",
           "MY_URL": "https://u:nvapi-0123456789@host"}
    assert redact.public_env(env, {"nvapi-0123456789"}) == {
        "NCCL_DEBUG": "INFO", "MY_URL": f"https://u:{redact.MASK}@host"}
