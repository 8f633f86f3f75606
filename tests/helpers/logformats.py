"""The lines training programs print, written from their formats (the tests' and the benches'
log generator; no log text is copied from anywhere).

Each family's step line, as its program formats it:

- NeMo 2 (Lightning's MegatronStrategy progress printer): `Training epoch {e}, iteration
  {i}/{max_steps - 1} | lr: .. | global_batch_size: .. | global_step: {g} | ... |
  train_step_timing in s: .. | TFLOPS_per_GPU: .. | consumed_samples: ..` (llmb.container.nemolog
  writes it); from the second data epoch on `iteration` restarts at 0 while `global_step` goes on.
- Lightning's progress bar: `Epoch 0: : 100%|###| {done}/{total} [mm:ss<mm:ss, key=value, ...,
  train_step_timing in s=..]`, redrawn with carriage returns; a DLLogger record (`DLL
  {timestamp} - {step} train_step_timing in s : {value} ...`, the value in full) printed after
  a draw continues the bar's line.
- Megatron-LM / Megatron-Bridge `training_log`: ` [%Y-%m-%d %H:%M:%S] iteration {k:8d}/{N:8d} |
  consumed samples: {:12d} | elapsed time per iteration (ms): {:.1f} | learning rate: {:.6E} |
  global batch size: {:5d} | lm loss: {:.6E} | loss scale: {:.1f} | grad norm: {:.3f} |
  number of skipped iterations: {:3d} | number of nan iterations: {:3d} |`, iterations counted
  from 1, from the last rank; Megatron-Bridge prints before it, from rank 0 only (a rank-0 log
  holds these and no iteration line), `Step Time : {:.2f}s GPU utilization:
  {:.1f}MODEL_TFLOP/s/GPU`, at times on the same line (the iteration line's own text starts with
  the blank before its time stamp). Megatron-Bridge's training_log adds, where its settings or
  the model call for them: `skipped samples: {:12d}` after the consumed ones, `throughput per
  GPU (TFLOP/s/GPU): {:.1f}`, `energy per GPU (J/iter/GPU): {:.1f}` and `power per GPU (W/GPU):
  {:.1f}` after the time, every other loss it tracks after `lm loss` as `{name}: {:.6E}` (a
  mixture of experts' `load_balancing_loss`, `z_loss`; multi-token prediction's `mtp_1 loss`),
  and `num zeros: {}`, `params norm: {:.3f}`, `max attention logit: {:.3f}` after the grad norm;
  Megatron-LM `decoupled learning rate: {:.6E}` after the learning rate (MegatronStep's `extra`,
  by name: OPTIONAL).

Plus what other tools write into files a tree may hold: nccl-tests' output, an Nsight Systems
report's text (`nsys stats`), NVIDIA's print_env.sh dump.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmb.container import megatronlog, nemolog

T0 = "2026-03-27 23:17"


def nemo_step(i: int, final: int, seconds: float, tflops: float | None = 610.2,
              gbs: int = 128, *, epoch: int = 0, global_step: int | None = None,
              loss: float | str = 11.96) -> str:
    """NeMo 2's step line; `global_step` defaults to i (the first data epoch)."""
    line = nemolog.step_line(
        iteration=i, last_iteration=final, lr=1.5e-05, global_batch_size=gbs,
        global_step=i if global_step is None else global_step, reduced_train_loss=11.96,
        train_step_timing=seconds, tflops_per_gpu=tflops or 0.0, consumed_samples=gbs * (i + 1),
        epoch=epoch)
    line = line.replace("reduced_train_loss: 11.96", f"reduced_train_loss: {loss}")
    if tflops is None:
        line = line.replace(f" | TFLOPS_per_GPU: {nemolog.g4(0.0)}", "")
    return line


def progress_bar(done: int, total: int, seconds: float, *, global_step: float | None = None
                 ) -> str:
    """One draw of Lightning's progress bar after `done` of `total` steps."""
    step = done - 1 if global_step is None else global_step
    pct = done * 100 // total
    return (f"Epoch 0: : {pct:3d}%|#####     | {done}/{total} [00:{done % 60:02d}<00:00, "
            f"reduced_train_loss={12 - done * 0.05:.3f}, global_step={step:.2f}, "
            f"consumed_samples={float(128 * done)}, train_step_timing in s={seconds:.3f}]")


def dll_record(step: int, seconds: float, *, micro: int = 123456) -> str:
    """A DLLogger record as its StdOutBackend prints it by default (`DLL {timestamp} - {step}
    {metric} : {value} {unit}`, each value as Python prints it: the step time in full)."""
    return (f"DLL {T0}:{step % 60:02d}.{micro:06d} - {step} reduced_train_loss : "
            f"{12 - step * 0.05!r}  train_step_timing in s : {seconds!r}  "
            f"global_step : {float(step)!r} ")


@dataclass(frozen=True)
class MegatronStep:
    """One Megatron iteration as its log prints it: k counts from 1."""

    k: int
    total: int
    ms: float  # elapsed time per iteration (ms), printed with one decimal
    tflops: float | None = None  # the Step Time line's MODEL_TFLOP/s/GPU (None: no such line)
    gbs: int = 128
    loss: float = 12.58
    grad_norm: str = "9.961"
    skipped: int = 0
    nan: int = 0
    second: int = 0
    extra: frozenset[str] = frozenset()  # of OPTIONAL: the fields it prints besides

    def _fields(self, after: str) -> str:
        return "".join(f" {text} |" for name, (where, text) in OPTIONAL.items()
                       if where == after and name in self.extra)

    def iteration_text(self) -> str:
        """The iteration line (its leading blank included)."""
        return (f" [{T0}:{self.second % 60:02d}] iteration {self.k:8d}/{self.total:8d} | "
                f"consumed samples: {self.k * self.gbs:12d} |{self._fields('consumed')} "
                f"elapsed time per iteration (ms): {self.ms:.1f} |{self._fields('time')} "
                f"learning rate: {6e-05:.6E} |{self._fields('lr')} "
                f"global batch size: {self.gbs:5d} | "
                f"lm loss: {self.loss:.6E} |{self._fields('loss')} loss scale: {1.0:.1f} | "
                f"grad norm: {self.grad_norm} |{self._fields('norm')} "
                f"number of skipped iterations: {self.skipped:3d} | "
                f"number of nan iterations: {self.nan:3d} |")

    def step_time_text(self) -> str:
        """The Step Time companion (its seconds rounded to 2 decimals), or ''."""
        if self.tflops is None:
            return ""
        return (f"Step Time : {self.ms / 1000:.2f}s GPU utilization: "
                f"{self.tflops:.1f}MODEL_TFLOP/s/GPU")

    def lines(self, glued: bool) -> list[str]:
        """The step as separate lines, or glued into one."""
        companion = self.step_time_text()
        if glued and companion:
            return [companion + self.iteration_text()]
        return [companion, self.iteration_text()] if companion else [self.iteration_text()]


# Megatron-Bridge's optional fields: name -> (the field they follow, the text as printed)
OPTIONAL = {
    "skipped samples": ("consumed", f"skipped samples: {0:12d}"),
    "throughput": ("time", f"throughput per GPU (TFLOP/s/GPU): {901.0:.1f}"),
    "energy": ("time", f"energy per GPU (J/iter/GPU): {4321.0:.1f} | power per GPU (W/GPU): "
                       f"{1031.5:.1f}"),
    "decoupled lr": ("lr", f"decoupled learning rate: {1e-05:.6E}"),
    "moe": ("loss", f"load_balancing_loss: {1.002345:.6E} | z_loss: {0.0031:.6E}"),
    "mtp": ("loss", f"mtp_1 loss: {11.2:.6E}"),
    "num zeros": ("norm", "num zeros: 0"),
    "params norm": ("norm", f"params norm: {1234.567:.3f}"),
    "max attention logit": ("norm", f"max attention logit: {45.1:.3f}"),
}


def megatron_startup(world: int, dp: int, seq_length: int = 8192, gbs: int = 128,
                     train_iters: int = 50) -> list[str]:
    """What a Megatron-Bridge job prints before its first step (llmb.container.megatronlog's
    lines, with the initialisation time Megatron prints before the set-up lines)."""
    lines = megatronlog.startup_lines(world, dp, seq_length, gbs, train_iters)
    return [*lines[:-2], "time to initialize megatron (seconds): 41.772", *lines[-2:]]


def nccl_tests_output(node: str = "node001", gpus: int = 8) -> list[str]:
    """nccl-tests' all_reduce_perf: its header, the devices, the table and the summary."""
    lines = ["# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup "
             "iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0", "#",
             "# Using devices"]
    lines += [f"#  Rank {r:2d} Group  0 Pid {4000 + r:6d} on {node:>10} device {r:2d} "
              f"[0x{16 + r:02x}] NVIDIA H100 80GB HBM3" for r in range(gpus)]
    lines += ["#", "#{:>12}{:>14}{:>10}{:>8}{:>8}{:>9}{:>8}{:>8}{:>7}".format(
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong")]
    size = 8
    while size <= 1 << 30:
        lines.append(f"{size:13d}{size // 4:14d}{'float':>10}{'sum':>8}{-1:8d}"
                     f"{13.0 + size / 4e5:9.2f}{size / 4e8:8.2f}{size / 2.3e8:8.2f}{0:7d}")
        size *= 64
    return [*lines, "# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 123.456", "#"]


def nsys_stats_text() -> list[str]:
    """What `nsys stats` prints for a report: the files it makes and its summary tables."""
    return [
        "Generating SQLite file /results/profile_2201400_0.sqlite from "
        "/results/profile_2201400_0.nsys-rep",
        "Processing [/results/profile_2201400_0.sqlite] with "
        "[/opt/nvidia/nsight-systems/2025.1/host-linux-x64/reports/cuda_gpu_kern_sum.py]... ",
        "",
        " ** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):",
        "",
        " Time (%)  Total Time (ns)  Instances  Avg (ns)  Med (ns)  Name",
        " --------  ---------------  ---------  --------  --------  ----",
        "     41.2      81234567890      12000  6769547.3  6711234.0  "
        "sm90_xmma_gemm_bf16bf16_bf16f32",
        "     12.9      25432198765       4000  6358049.7  6301234.5  "
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
    ]


def print_env_dump() -> list[str]:
    """NVIDIA's print_env.sh: its sections, each line indented, in an HTML details block."""
    body = ["***OS Information***", "DISTRIB_ID=Ubuntu", "Linux node001 5.15.0 x86_64",
            "", "***GPU Information***", "NVIDIA-SMI 570.86.15   Driver Version: 570.86.15",
            "", "***Environment Variables***", f"{'PATH':<32}: /usr/local/bin:/usr/bin",
            "", "***pip packages***", "megatron-core 0.13.0", "nemo_toolkit 2.3.1",
            "torch 2.7.0"]
    return (["<details><summary>Click here to see environment details</summary><pre>",
             "     "] + [f"     {line}" for line in body] + ["</pre></details>"])
