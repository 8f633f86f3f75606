"""The log corpus (tests/fixtures/logs/corpus): a log in every family and shape the analyzer
reads, written from the formats (logformats), each with what it printed, so that a test works
out the truth from the printed text and never from the analyzer.

    CASES[name] -> Case: its experiment, the --gpu-type it is analyzed with, its lines, and
                   the window's step times and TFLOPS exactly as printed (seconds, or
                   Megatron's milliseconds)

tests/fixtures/logs/make_corpus.py writes them as an install lays runs out; tests/analysis/
test_corpus.py holds the written files to this module and the analyzer to the truth.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from llmb.container import nemolog
from logformats import (
    OPTIONAL,
    MegatronStep,
    megatron_startup,
    nccl_tests_output,
    nemo_step,
    nsys_stats_text,
    print_env_dump,
    progress_bar,
)

WINDOW = range(11, 45)  # the published window, 0-based step indices
LLAMA_NEMO = "pretrain_llama3.1_8b_fp8_gpus8_tp1_pp1_cp2_vpNone_mbs1_gbs128"
LLAMA_BRIDGE = "pretrain_llama3.1_8b_bf16_gpus8_tp1_pp1_cp1_vpNone_ep1_mbs2_gbs128"
QWEN = "pretrain_qwen3_30b_a3b_bf16_gpus8_tp1_pp1_cp1_vpNone_ep8_mbs8_gbs512"
OOM = ["[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB.",
       "srun: error: node003: task 5: Exited with exit code 1"]


@dataclass
class Case:
    experiment: str
    lines: list[str] = field(default_factory=list)
    gpu_type: str | None = None  # --gpu-type for this case
    family: str = "nemo"
    times: dict[int, str] = field(default_factory=dict)  # step index -> its time as printed
    tflops: dict[int, str] = field(default_factory=dict)  # step index -> TFLOPS as printed
    job: int = 4100000

    def window(self) -> tuple[list[str], list[str]]:
        """The window's printed step times and TFLOPS (the steps the run printed last)."""
        return ([self.times[i] for i in WINDOW if i in self.times],
                [self.tflops[i] for i in WINDOW if i in self.tflops])


# --- NeMo 2 ------------------------------------------------------------------------------------

def nemo_startup(gpus: int = 8) -> list[str]:
    return [nemolog.member_line(0, gpus), nemolog.registered_line(gpus),
            nemolog.log_line("Experiments will be logged at /nemo_run/code/nemo_experiments",
                             "nemo_logging:393", now=1744382925.0)]


def nemo_seconds(i: int, scale: float = 1.0) -> float:
    return (9.3 + (i * 7 % 11) / 100 if i else 40.0) * scale  # the first step is warm-up


def nemo_tflops(seconds: float) -> float:
    return 128 * 4.74e14 / seconds / 8 / 1e12  # what llama3.1 8b's FLOPs give


def nemo_run(case: Case, steps: range, *, prefix: str = "", epoch_len: int = 0,
             line: Callable[[int, str], str] | None = None, scale: float = 1.0) -> None:
    """Step lines for the given steps (their global step), each recorded as printed."""
    for g in steps:
        seconds = nemo_seconds(g, scale)
        epoch, i = divmod(g, epoch_len) if epoch_len else (0, g)
        text = nemo_step(i, 49, seconds, nemo_tflops(seconds), epoch=epoch, global_step=g)
        if line is not None:
            text = line(g, text)
        case.lines.append(prefix + text)
        case.times[g] = nemolog.g4(seconds)
        case.tflops[g] = nemolog.g4(nemo_tflops(seconds))


def nemo_cases() -> dict[str, Case]:
    cases = {}
    rollover = Case(LLAMA_NEMO, nemo_startup())
    nemo_run(rollover, range(50), epoch_len=20)  # epoch 1 from step 20, epoch 2 from step 40
    cases["nemo-epoch-rollover"] = rollover
    restart = Case(LLAMA_NEMO, nemo_startup(), job=4100001)
    nemo_run(restart, range(21))
    restart.lines.append("slurmstepd: error: *** STEP 4100001.0 ON node7 CANCELLED AT "
                         "2025-04-11T16:18:45 DUE TO JOB REQUEUE ***")
    restart.times.clear()
    restart.tflops.clear()
    nemo_run(restart, range(50))
    cases["nemo-restart"] = restart
    ranked = Case(LLAMA_NEMO, [f"retraining/0 [default0]:{x}" for x in nemo_startup()],
                  job=4100002)
    nemo_run(ranked, range(50), prefix="retraining/0 [default0]:", line=lambda g, text: (
        text.replace(" | TFLOPS_per_GPU:", f" | tokens_per_sec_per_gpu: {1234 + g} | "
                     "TFLOPS_per_GPU:") + (" | val_loss: 11.2" if g == 49 else "")))
    ranked.lines += ranked.lines[-3:]  # a rank prints the last steps again
    cases["nemo-rank-prefix"] = ranked
    stamped = Case(LLAMA_NEMO, job=4100003)
    nemo_run(stamped, range(50), prefix="[2025-11-20T14:55:23+08:00] retraining/0 ")
    cases["nemo-timestamp-prefix"] = stamped
    labelled = Case(LLAMA_NEMO, [" 0: " + x for x in nemo_startup()], "b200", job=4100007)
    nemo_run(labelled, range(50), prefix=" 0: ", scale=0.45)  # 1.8e+03 TFLOPS: scientific
    cases["nemo-srun-label-scientific"] = labelled
    bar = Case(LLAMA_NEMO, nemo_startup(), job=4100004)
    draws = []
    for done in range(1, 51):
        seconds = round(nemo_seconds(done - 1), 3)
        draws.append(progress_bar(done, 50, seconds))
        bar.times[done - 1] = f"{seconds:.3f}"
    bar.lines.append("\r".join(draws))  # one line redrawn with carriage returns
    cases["nemo-progress-bar"] = bar
    bare = Case(LLAMA_NEMO, nemo_startup(), job=4100005)
    nemo_run(bare, range(50), line=lambda g, text: text.split(" | TFLOPS_per_GPU")[0])
    bare.tflops.clear()
    cases["nemo-no-tflops"] = bare
    cases["nemo-startup-only"] = Case(LLAMA_NEMO, nemo_startup(), job=4100006)
    return cases


# --- Megatron-LM / Megatron-Bridge -----------------------------------------------------------

def bridge_ms(k: int) -> float:
    return round(4189.6 + (k * 13 % 17) / 10, 1) if k > 1 else 20289.1


def bridge_run(case: Case, upto: int = 50, *, glued_from: int = 10, tflops_at: float = 1810.0,
               prefix: str = "", change: Callable[[MegatronStep], MegatronStep] | None = None,
               noise: bool = True, gbs: int = 128) -> None:
    """Iterations 1..upto of a 50-iteration run, each recorded as printed (step k - 1)."""
    case.family = "megatron"
    for k in range(1, upto + 1):
        step = MegatronStep(k, 50, bridge_ms(k), round(tflops_at * 4189.6 / bridge_ms(k), 1),
                            gbs, second=k)
        if change is not None:
            step = change(step)
        if noise:
            case.lines.append(prefix + f"[Rank 0] (after {k} iterations) memory (GB) | "
                              "mem-allocated-gigabytes: 51.072")
        case.lines += [prefix + x for x in step.lines(glued=k >= glued_from)]
        case.times[k - 1] = f"{step.ms:.1f}"
        if step.tflops is not None:
            case.tflops[k - 1] = f"{step.tflops:.1f}"


def rank0_run(case: Case, upto: int = 50, *, tflops_at: float = 1810.0) -> None:
    """What rank 0 prints of iterations 1..upto: the Step Time lines alone (the last rank prints
    the iteration lines), the memory report after the first; each recorded as printed."""
    case.family = "bridge-step-time"
    for k in range(1, upto + 1):
        step = MegatronStep(k, 50, bridge_ms(k), round(tflops_at * 4189.6 / bridge_ms(k), 1))
        case.lines.append(step.step_time_text())
        if k == 1:
            case.lines.append("[Rank 0] (after 1 iterations) memory (GB) | "
                              "mem-allocated-gigabytes: 51.072")
        case.times[k - 1] = f"{step.ms / 1000:.2f}"
        case.tflops[k - 1] = f"{step.tflops:.1f}"


def bridge_rank0_cases() -> dict[str, Case]:
    """Rank 0's own logs: a dense model's, a mixture of experts'."""
    dense = Case(LLAMA_BRIDGE, megatron_startup(8, 8, gbs=128), "b200", job=4200020)
    rank0_run(dense)
    moe = Case(QWEN, megatron_startup(8, 8, seq_length=4096, gbs=512), "b300", job=4200021)
    rank0_run(moe, tflops_at=900.0)
    return {"bridge-rank0-step-time": dense, "bridge-rank0-moe": moe}


# the precisions Megatron-Bridge's experiment names carry besides bf16 and fp8
DTYPES = {"fp8_cs": "fp8", "fp8_mx": "fp8", "nvfp4": "nvfp4"}  # -> the peak they are held to


def bridge_dtype_cases() -> dict[str, Case]:
    """A complete B200 run in each of DTYPES."""
    cases = {}
    for n, dtype in enumerate(DTYPES):
        case = Case(LLAMA_BRIDGE.replace("_bf16_", f"_{dtype}_"), megatron_startup(8, 8),
                    "b200", job=4200030 + n)
        bridge_run(case)
        cases[f"bridge-{dtype.replace('_', '-')}"] = case
    return cases


def megatron_cases() -> dict[str, Case]:
    cases = {}
    for gpu, job in (("b200", 4200000), ("b300", 4200001)):
        case = Case(LLAMA_BRIDGE, megatron_startup(8, 8, gbs=128), gpu, job=job)
        bridge_run(case, tflops_at=1810.0 if gpu == "b200" else 1990.0)
        cases[f"bridge-{gpu}-glued"] = case
    qwen = Case(QWEN, megatron_startup(8, 8, seq_length=4096, gbs=512), "b300", job=4200002)
    bridge_run(qwen, tflops_at=900.0, gbs=512)
    cases["bridge-unknown-model"] = qwen
    moe = Case(QWEN, megatron_startup(8, 8, seq_length=4096, gbs=512), "b300", job=4200010)
    bridge_run(moe, tflops_at=900.0, gbs=512,  # every field Megatron-Bridge may add
               change=lambda s: replace(s, extra=frozenset(OPTIONAL) - {"decoupled lr"}))
    cases["bridge-moe-fields"] = moe
    nan = Case(LLAMA_BRIDGE, megatron_startup(8, 8), "b200", job=4200003)
    bridge_run(nan, change=lambda s: s if s.k != 30 else replace(s, nan=1, grad_norm="nan"))
    cases["bridge-nan-iterations"] = nan
    grad = Case(LLAMA_BRIDGE, megatron_startup(8, 8), "b200", job=4200004)
    bridge_run(grad, change=lambda s: s if s.k != 18 else replace(s, grad_norm="inf"))
    cases["bridge-inf-grad-norm"] = grad
    skipped = Case(LLAMA_BRIDGE, megatron_startup(8, 8), "b200", job=4200005)
    bridge_run(skipped, change=lambda s: s if s.k not in (5, 6) else replace(s, skipped=1))
    cases["bridge-skipped"] = skipped
    oom = Case(LLAMA_BRIDGE, megatron_startup(8, 8), "b200", job=4200006)
    bridge_run(oom, upto=23)
    oom.lines = [f"{n % 8}: {line}" for n, line in enumerate(oom.lines + OOM)]  # srun --label
    cases["bridge-oom"] = oom
    stamped = Case(LLAMA_BRIDGE, megatron_startup(8, 8), "b200", job=4200007)
    bridge_run(stamped, glued_from=99, prefix="[2025-11-20T14:55:23+08:00] retraining/0 ")
    cases["bridge-timestamp-prefix"] = stamped
    lm = Case(LLAMA_BRIDGE, ["using world size: 8, data-parallel size: 4, context-parallel "
                             "size: 1, tensor-model-parallel size: 2, pipeline-model-parallel "
                             "size: 1"], "b200", job=4200008)
    bridge_run(lm, noise=False, change=lambda s: replace(s, tflops=None))
    for k in range(1, 51):  # Megatron-LM prints its throughput in the iteration line
        lm.tflops[k - 1] = f"{1750.0 + k % 3:.1f}"
        lm.lines[k] = lm.lines[k].replace(
            " | learning rate:", f" | throughput per GPU (TFLOP/s/GPU): {lm.tflops[k - 1]} | "
            "learning rate:")
    cases["megatron-lm-inline-throughput"] = lm
    wrong = Case(LLAMA_BRIDGE.replace("gpus8", "gpus16"), megatron_startup(8, 8)[1:], "b200",
                 job=4200009)  # no world-size line: its data_parallel_size 8 says 8 GPUs
    bridge_run(wrong)
    cases["bridge-data-parallel-mismatch"] = wrong
    return cases


def other_tools() -> dict[str, Case]:
    return {"nccl-tests": Case(LLAMA_NEMO, nccl_tests_output(), job=4300000),
            "nsys-report": Case(LLAMA_NEMO, nsys_stats_text(), job=4300001),
            "print-env": Case(LLAMA_NEMO, print_env_dump(), job=4300002)}


CASES: dict[str, Case] = {**nemo_cases(), **megatron_cases(), **bridge_rank0_cases(),
                          **bridge_dtype_cases(), **other_tools()}


def text(case: Case) -> str:
    return "\n".join(case.lines) + "\n"
