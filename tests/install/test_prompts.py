"""llmb.install.prompts: numbered choices (numbers, names, `all`; anything else asked again with
the reason), descriptions taken from the data (common/gpus.yaml, metadata.yaml, sinfo's
partitions), and the token file that `--record` asks for instead of the token. Through a real
terminal: tests/install/test_record.py."""

from __future__ import annotations

import pytest
from llmb.install import prompts
from llmb.install.fields import InstallError
from llmb.recipes import catalog
from llmb.shared import slurmquery


def replies(*answers: str):
    it = iter(answers)
    asked: list[str] = []

    def input_fn(prompt: str) -> str:
        asked.append(prompt)
        return next(it)

    return input_fn, asked


def test_the_numbered_answers():
    choices = prompts.gpu_choices()
    assert prompts.picked("2", choices, False) == ["b200"]
    assert prompts.picked(" GB200 ", choices, False) == ["gb200"]
    assert prompts.picked("1 3", choices, False) == "1 3: give one number or name"
    assert prompts.picked("all", choices, True) == ["h100", "b200", "gb200", "h200", "b300",
                                                    "gb300"]
    assert prompts.picked("3,1 3", choices, True) == ["gb200", "h100"]
    assert prompts.picked("0", choices, True) == (
        "0 is not one of: h100, b200, gb200, h200, b300, gb300 (or their numbers 1-6, or all)")
    assert prompts.picked("all", choices, False) == (
        "all is not one of: h100, b200, gb200, h200, b300, gb300 (or their numbers 1-6)")


def test_a_wrong_answer_is_asked_again_with_the_reason(capsys):
    input_fn, asked = replies("7", "b200 gb200", "")
    picked = prompts.choose(input_fn, "GPU type", prompts.gpu_choices(), "h100")
    assert picked == ["h100"]  # Enter: the default
    out = capsys.readouterr().out
    assert out.splitlines()[:7] == [
        "GPU type:",
        "   1) h100   8 GPUs per node, x86_64, 989/1979 dense TFLOPS per GPU (BF16/FP8)",
        "   2) b200   8 GPUs per node, x86_64, 2250/4500 dense TFLOPS per GPU (BF16/FP8)",
        "   3) gb200  4 GPUs per node, aarch64, 2450/4900 dense TFLOPS per GPU (BF16/FP8)",
        ("   4) h200   8 GPUs per node, x86_64, 989/1979 dense TFLOPS per GPU (BF16/FP8)"
         "; no recipe publishes it: llmb-run screen and the analyzer only"),
        "   5) b300   8 GPUs per node, x86_64, 2250/4500 dense TFLOPS per GPU (BF16/FP8)",
        "   6) gb300  4 GPUs per node, aarch64, 2450/4900 dense TFLOPS per GPU (BF16/FP8)"]
    assert "  7 is not one of: h100, b200, gb200, h200, b300, gb300 (or their numbers 1-6)" in out
    assert "  b200 gb200: give one number or name" in out
    assert asked == ["GPU type (a number or a name) (default: h100): "] * 3

    def ended(_prompt: str) -> str:
        raise EOFError

    with pytest.raises(InstallError, match="no answer to 'GPU type"):
        prompts.choose(ended, "GPU type", prompts.gpu_choices(), "h100")


def test_a_choice_still_passes_its_own_check(capsys):
    input_fn, _ = replies("1", "2")

    def refuse_bad(_name: str, value: str) -> None:
        if value == "bad":
            raise prompts.values.BadValue("no")

    check = prompts.answer_check(refuse_bad, "x")
    choices = [prompts.Choice("bad", "refused by the check"), prompts.Choice("good", "fine")]
    assert prompts.choose(input_fn, "Pick", choices, None, check=check) == ["good"]
    assert "  no" in capsys.readouterr().out


def test_descriptions_come_from_the_data():
    h100 = {c.name: c.description for c in prompts.workload_choices("h100", "slurm")}
    assert h100 == {
        "pretrain_llama3.1": "Llama 3.1 8b, 70b, 405b on h100; needs a Hugging Face token",
        "pretrain_nemotron4": "Nemotron-4 15b, 340b on h100",
        "pretrain_nemotronh": "Nemotron-H 56b on h100",
        "pretrain_deepseek-v3": "DeepSeek-V3 671b on h100",
        "pretrain_gpt_oss": "gpt-oss 120b on h100",
        "pretrain_llama3.1-bridge": "Llama 3.1 (Megatron-Bridge) 405b, 70b, 8b on h100",
        "pretrain_nemotron-h": "Nemotron-H (Megatron-Bridge) 56b on h100",
        "pretrain_nemotron_3": "Nemotron 3 30b on h100",
        "pretrain_qwen3": "Qwen3 235b, 30b on h100"}
    assert [c.name for c in prompts.workload_choices("gb200", "runai")] == [
        r.workload for r in catalog.all_recipes()
        if "gb200" in r.gpu_types and "runai" in r.data["cluster_types"]]
    parts = prompts.partition_choices([slurmquery.Partition("batch", True, "gpu:h100:8"),
                                       slurmquery.Partition("cpu", False, "", False)])
    assert [(c.name, c.description) for c in parts] == [
        ("batch", "the default, 8 GPUs per node (gpu:h100:8)"), ("cpu", "no GPUs, not up")]


def test_the_token_file_record_asks_for_is_checked_never_shown(tmp_path):
    good = tmp_path / "tok"
    good.write_text("hf_AbcdefghijklmnopQRST\n")
    good.chmod(0o600)
    assert prompts.token_file_check(str(good)) is None
    (tmp_path / "short").write_text("hf_x\n")
    (tmp_path / "short").chmod(0o600)
    problem = prompts.token_file_check(str(tmp_path / "short"))
    assert problem and "hf_x" not in problem
    assert prompts.token_file_check(str(tmp_path / "none")) == (
        f"{tmp_path / 'none'} cannot be read (No such file or directory); it must be a file "
        "holding the token only")
    assert "cannot be read" in str(prompts.token_file_check(str(tmp_path)))
