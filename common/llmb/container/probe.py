"""What `llmb-run screen` measures, as one task (one GPU; with --smoke one CPU process) does it.

All-reduce bandwidth, as nccl-tests defines it (NVIDIA/nccl-tests v2.19.6, doc/PERFORMANCE.md;
src/all_reduce.cu, AllReduceGetBw; src/common.cu for the timing):

    algbw = S / t                      S: bytes each rank reduces, t: seconds per all-reduce
    busbw = algbw * 2 (n - 1) / n      n: ranks taking part

t is each rank's mean over `iters` back-to-back all-reduces after `warmup` untimed ones,
averaged over the ranks (nccl-tests' default, `-a 1`). GB/s are 1e9 bytes per second, as
nccl-tests prints them. torch.distributed.all_reduce works in place: compare with nccl-tests'
in-place columns, which `parse_nccl_tests` reads.

Per task: dense matrix multiply throughput, 2 n^3 floating-point operations per n x n product
(bf16, and fp8 through torch._scaled_mm where GPU and PyTorch have it; fp32 on the CPU), and
memory bandwidth of a copy between two buffers, counted as bytes read plus bytes written
(2 x the buffer per copy, as STREAM's Copy counts it). Both run back to back for a fixed wall
time (`window_s`): every task measures over the same stretch of time.

Repeats: every figure is measured several times in the same job; `value_of` makes one figure
of them (llmb.llmbrun.screen.precision judges by the noise they show). An all-reduce's repeats
(`allreduce_repeats`) run at the sweep's largest size, each timing as many all-reduces as fill
`window_s` by the sweep's own time for that size (the same count on every rank, so that they
stay in step), and never fewer than the sweep's `iters`.

The CPU and the GPU share every line but the device and the process-group backend, both held
by `Device`. torch is imported inside the functions.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    import torch
    from torch.distributed import ProcessGroup

GB = 1e9
TERA = 1e12
SCHEDSTAT = "/proc/thread-self/schedstat"
WAIT_LIMIT = 10
TRIM_FROM = 5  # repeats from which the lowest and the highest are left out


def value_of(repeats: Sequence[float]) -> float:
    """One figure from its repeats: their mean less the lowest and the highest (from TRIM_FROM
    repeats on; the plain mean below that): a disturbed repeat does not move it."""
    data = sorted(float(r) for r in repeats)
    kept = data[1:-1] if len(data) >= TRIM_FROM else data
    return math.fsum(kept) / len(kept)


@dataclass(frozen=True)
class Device:
    """Where a task measures: `cuda` (GPU `index`, NCCL) or `cpu` (gloo)."""

    kind: str
    index: int = 0

    @property
    def backend(self) -> str:
        return "nccl" if self.kind == "cuda" else "gloo"

    def torch(self) -> torch.device:
        import torch

        return torch.device(self.kind, self.index) if self.kind == "cuda" else torch.device("cpu")

    def sync(self) -> None:
        """Wait for the work queued on the device (a GPU runs kernels asynchronously)."""
        if self.kind == "cuda":
            import torch

            torch.cuda.synchronize(self.index)

    def waited(self) -> float:
        """On the CPU, the seconds this thread has spent runnable but waiting for a core
        (the kernel's run-queue delay, /proc/thread-self/schedstat's second field); 0 on a GPU
        and where the kernel does not say."""
        if self.kind == "cuda":
            return 0.0
        try:
            return int(Path(SCHEDSTAT).read_text().split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            return 0.0


def bus_factor(ranks: int) -> float:
    """nccl-tests' all-reduce correction: 2 (n - 1) / n."""
    return 2 * (ranks - 1) / ranks


def bandwidths(nbytes: int, seconds: float, ranks: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s of an all-reduce of `nbytes` per rank taking `seconds`."""
    algbw = nbytes / GB / seconds
    return algbw, algbw * bus_factor(ranks)


def timed_window(step: Callable[[], object], device: Device, window_s: float,
                 warmup: int = 2) -> tuple[int, float]:
    """Run `step` until `window_s` seconds have passed (after `warmup` untimed calls):
    (calls, seconds). On the CPU the seconds leave out the time the kernel kept this thread
    waiting for a core (Device.waited): processes sharing the cores, the screen's own or
    anyone's, are the scheduler's doing, not the node's; time the thread was stopped, or ran
    slowly, still counts. The window then runs until that many such seconds have passed
    (WAIT_LIMIT windows of wall time at most)."""
    for _ in range(warmup):
        step()
    device.sync()
    calls, start, waited = 0, time.perf_counter(), device.waited()
    while True:
        step()
        device.sync()
        calls += 1
        wall = time.perf_counter() - start
        elapsed = wall - (device.waited() - waited)
        if elapsed >= window_s or wall >= WAIT_LIMIT * window_s:
            return calls, elapsed


def matmul_tflops(device: Device, dtype: str, n: int, window_s: float) -> float:
    """Dense n x n matrix products per second, in TFLOPS (2 n^3 operations each)."""
    import torch

    dev = device.torch()
    if dtype == "fp8":
        a = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn).t()  # column-major
        one = torch.tensor(1.0, device=dev)

        def step() -> object:
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    else:
        kind = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
        a, b = (torch.randn(n, n, device=dev, dtype=kind) for _ in range(2))

        def step() -> object:
            return a @ b
    calls, seconds = timed_window(step, device, window_s)
    return 2 * n**3 * calls / seconds / TERA


def memory_gbps(device: Device, nbytes: int, window_s: float) -> float:
    """Copies of an `nbytes` buffer per second, counted as read + written, in GB/s."""
    import torch

    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device.torch())
    dst = torch.empty_like(src)
    calls, seconds = timed_window(lambda: dst.copy_(src), device, window_s)
    return 2 * src.numel() * 4 * calls / seconds / GB


def allreduce_sweep(device: Device, group: ProcessGroup | None, ranks: int, sizes: Sequence[int],
                    iters: int, warmup: int) -> list[dict[str, float]]:
    """One all-reduce per size in `group` (n = ranks): per size the bytes, the time in
    microseconds (the ranks' mean) and algbw/busbw in GB/s. Every rank of the group calls it."""
    import torch
    import torch.distributed as dist

    rows = []
    for nbytes in sizes:
        buf = torch.zeros(nbytes // 4, dtype=torch.float32, device=device.torch())
        for _ in range(warmup):
            dist.all_reduce(buf, group=group)
        seconds = _timed_allreduce(device, group, buf, iters, ranks)
        algbw, busbw = bandwidths(nbytes, seconds, ranks)
        rows.append({"bytes": nbytes, "time_us": seconds * 1e6, "algbw_gbps": algbw,
                     "busbw_gbps": busbw})
    return rows


def _timed_allreduce(device: Device, group: ProcessGroup | None, buf: torch.Tensor, count: int,
                     ranks: int) -> float:
    """Seconds per all-reduce of buf, `count` of them timed back to back: the ranks' mean (the
    same on every rank)."""
    import torch
    import torch.distributed as dist

    device.sync()
    start = time.perf_counter()
    for _ in range(count):
        dist.all_reduce(buf, group=group)
    device.sync()
    mine = torch.tensor([(time.perf_counter() - start) / count], dtype=torch.float64,
                        device=device.torch())
    dist.all_reduce(mine, group=group)  # the sum over the ranks: their mean below
    return float(mine.item()) / ranks


def allreduce_repeats(device: Device, group: ProcessGroup | None, ranks: int, nbytes: int,
                      seconds_each: float, window_s: float, iters: int, repeats: int
                      ) -> tuple[list[float], int]:
    """`repeats` measurements of busbw (GB/s) at `nbytes`, each over at least `window_s`
    seconds by `seconds_each` (the sweep's time per all-reduce of that size, the ranks'
    mean: the same on every rank) and at least `iters` all-reduces: (busbw per repeat, the
    all-reduces each timed)."""
    import torch

    count = max(iters, math.ceil(window_s / seconds_each)) if seconds_each > 0 else iters
    buf = torch.zeros(nbytes // 4, dtype=torch.float32, device=device.torch())
    out = []
    for _ in range(repeats):
        out.append(bandwidths(nbytes, _timed_allreduce(device, group, buf, count, ranks),
                              ranks)[1])
    return out, count


# nccl-tests' table: size count type redop root | time algbw busbw #wrong (out of place)
# | time algbw busbw #wrong (in place). Rows of numbers; "N/A" where a check was not made.
_NCCL_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+\s+\S+\s+-?\d+"
                       r"\s+(\S+)\s+(\S+)\s+(\S+)\s+\S+\s+(\S+)\s+(\S+)\s+(\S+)\s+\S+\s*$")
_NCCL_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)")


class NcclTable(TypedDict):
    ranks: int  # how many it reports
    hosts: list[str]
    sizes: list[dict[str, float]]  # per size: bytes, time_us, algbw_gbps, busbw_gbps


def parse_nccl_tests(text: str) -> NcclTable:
    """all_reduce_perf's output: the ranks it reports (`# Rank N ... on HOST`) and, per
    size, the in-place time (us), algbw and busbw (GB/s)."""
    ranks: dict[int, str] = {}
    rows = []
    for line in text.splitlines():
        if m := _NCCL_RANK.match(line):
            ranks[int(m.group(1))] = m.group(2)
        elif m := _NCCL_ROW.match(line):
            try:
                time_us, algbw, busbw = (float(m.group(i)) for i in (6, 7, 8))
            except ValueError:
                continue
            rows.append({"bytes": int(m.group(1)), "time_us": time_us, "algbw_gbps": algbw,
                         "busbw_gbps": busbw})
    return {"ranks": len(ranks), "hosts": sorted(set(ranks.values())), "sizes": rows}
