"""llmb.shared.redact: secrets are kept out by name and by value, and a short value masks
nothing."""

from __future__ import annotations

import pytest
from llmb.shared import redact


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


def test_tokenizer_names_are_not_secret() -> None:
    assert not redact.is_secret_name("TOKENIZERS_PARALLELISM")
    assert not redact.is_secret_name("tokenizer")
    assert redact.is_secret_name("HF_TOKEN") and redact.is_secret_name("MAX_TOKENS")


HF = "hf_" + "Ab3" * 12  # the shape of a Hugging Face token (hf_ + 34 letters and digits)


@pytest.mark.parametrize(("text", "expected"), [
    # secret-named assignments: shell, env, JSON, YAML, flags; quotes and separators kept
    ("export HF_TOKEN=abc.def-123", f"export HF_TOKEN={redact.MASK}"),
    ('{"APP_SECRET": "s p a c e s", "n": 1}', f'{{"APP_SECRET": "{redact.MASK}", "n": 1}}'),
    ("  password: 'hunter2'", f"  password: '{redact.MASK}'"),
    ("srun --password=hunter2 x", f"srun --password={redact.MASK} x"),
    ("wandb_api_key = k-123", f"wandb_api_key = {redact.MASK}"),
    # credential-shaped strings, whatever they are called
    (f"loading with {HF} now", f"loading with {redact.MASK} now"),
    ("key nvapi-ABCDEFGHIJKLMNOPQRSTUVWX01", f"key {redact.MASK}"),
    ("id AKIAABCDEFGHIJKLMNOP", f"id {redact.MASK}"),
    ("git clone https://me:pa55@github.com/x", f"git clone https://me:{redact.MASK}@github.com/x"),
    ("Authorization: Bearer abc.def", f"Authorization: Bearer {redact.MASK}"),
    # not secrets: a secret-named key's boolean, number, reference; lookalike names
    ("HF_TOKEN_REQUIRED: true", "HF_TOKEN_REQUIRED: true"),
    ("export HF_TOKEN=$HF_TOKEN", "export HF_TOKEN=$HF_TOKEN"),
    ("MAX_TOKENS=4096", "MAX_TOKENS=4096"),
    ("export TOKENIZERS_PARALLELISM=False", "export TOKENIZERS_PARALLELISM=False"),
    ('"tokenizer": {"library": "huggingface"}', '"tokenizer": {"library": "huggingface"}'),
    ("Training epoch 0, iteration 11/49 | lr: 1.5e-05 | global_batch_size: 128 | "
     "train_step_timing in s: 12.39 | TFLOPS_per_GPU: 610.2",
     "Training epoch 0, iteration 11/49 | lr: 1.5e-05 | global_batch_size: 128 | "
     "train_step_timing in s: 12.39 | TFLOPS_per_GPU: 610.2"),
    ("hf_transformers_cache_dir=/x", "hf_transformers_cache_dir=/x"),
])
def test_redact_text(text: str, expected: str) -> None:
    assert redact.redact_text(text) == expected
    assert redact.clear_secrets(redact.redact_text(text)) == []
    assert bool(redact.clear_secrets(text)) == (text != expected)


def test_redact_text_masks_known_values_whatever_the_text_calls_them() -> None:
    values = redact.secret_values({"MY_PASSWORD": "correct horse battery"})
    out = redact.redact_text("echo 'correct horse battery' > /tmp/x", values)
    assert out == f"echo '{redact.MASK}' > /tmp/x"


def test_redacted_json_stays_json() -> None:
    import json

    data = {"env": {"HF_TOKEN": HF, "NGC_API_KEY": "nvapi-x", "NCCL_DEBUG": "INFO"},
            "tokenizer": {"library": "hf"}, "quote": 'a "b" c', "hf_token_required": True}
    back = json.loads(redact.redact_text(json.dumps(data, indent=2)))
    assert back["env"] == {"HF_TOKEN": redact.MASK, "NGC_API_KEY": redact.MASK,
                           "NCCL_DEBUG": "INFO"}
    assert back["tokenizer"] == data["tokenizer"] and back["quote"] == data["quote"]
    assert back["hf_token_required"] is True


@pytest.mark.parametrize("token", [
    HF, "nvapi-ABCDEFGHIJKLMNOPQRSTUVWX01", "ghp_" + "a1B2" * 9, "gho_" + "Zz9" * 11,
    "github_pat_" + "a_1" * 11, "AKIAABCDEFGHIJKLMNOP", "ASIAABCDEFGHIJKLMNOP",
    "xoxb-1234567890-abcdefjklmn",
])
def test_every_token_shape_is_masked_in_a_message_and_in_text(token: str) -> None:
    """Each form of credential-shaped string, alone in a line (the substitutions run only where
    a line holds their literal part: each form's own is looked for)."""
    for mask in (redact.for_people, redact.redact_text):
        assert mask(f"error: {token} refused") == f"error: {redact.MASK} refused"
    for text in ("https://me:pa55@github.com/x", "AUTHORIZATION: Bearer abc.def",
                 "authorızation: bearer abc.def"):  # (re.I: a dotless ı is an i)
        assert "pa55" not in redact.for_people(text) and "abc.def" not in redact.for_people(text)
