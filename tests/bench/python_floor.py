"""The least a Python reader of Megatron-Bridge logs does per log, on every core: the bench's floor.

    python tests/bench/python_floor.py TREE OUT

Not an analyzer: a yardstick for the trees of many small logs, where the cost is per log, not
per byte. The `*.out` files of TREE's top folder are shared out among one forked process per
core; each opens and reads its logs (64 KiB reads up to the end), finds every iteration line's
step time and every `Step Time` line's TFLOPS with one expression each, takes the mean and
population standard deviation of the published window (iterations 12-45, steps 11-44) and
writes one JSON line per log (file name, path, the three figures, the last iteration): each
process to a file of its own, put together into OUT at the end.
No identity, no status rules, no health fields, no cross-checks, no ordering: whatever an
analyzer does beyond this costs more. Its wall time, set beside grep's, shows how close to
`grep -rc` any Python reader can come on the machine the bench runs on.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys

_ITERATION = re.compile(rb"iteration +(\d+)/ *\d+ \| consumed samples: +\d+ \| "
                        rb"elapsed time per iteration \(ms\): ([\d.]+)")
_TFLOPS = re.compile(rb"utilization: ([\d.]+)MODEL_TFLOP/s/GPU")
_READ = 1 << 16
_WINDOW = slice(11, 45)  # iterations 12-45 are steps 11-44


def _mean_std(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    mean = sum(values) / len(values)
    return mean, (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5


def _line(folder: str, name: str) -> str:
    path = os.path.join(folder, name)
    fd = os.open(path, os.O_RDONLY)
    try:
        parts = [os.read(fd, _READ)]
        while len(parts[-1]) == _READ:
            parts.append(os.read(fd, _READ))
    finally:
        os.close(fd)
    data = b"".join(parts)
    rows = _ITERATION.findall(data)
    time_mean, time_std = _mean_std([float(ms) / 1000 for _, ms in rows[_WINDOW]])
    tflops, _ = _mean_std([float(t) for t in _TFLOPS.findall(data)[_WINDOW]])
    return json.dumps({"filename": name, "path": path, "time_mean": time_mean,
                       "time_std_dev": time_std, "tflops_per_gpu_mean": tflops,
                       "max_iteration": int(rows[-1][0]) - 1 if rows else None})


def _share(folder: str, names: list[str], out_path: str) -> None:
    """One process's logs, their lines written to a file of its own."""
    with open(out_path, "w") as lines:
        for name in names:
            lines.write(_line(folder, name) + "\n")


def main(tree: str, out_path: str) -> int:
    names = sorted(e.name for e in os.scandir(tree) if e.name.endswith(".out"))
    cores = len(os.sched_getaffinity(0))
    parts = [f"{out_path}.{n}" for n in range(cores)]
    for n, part in enumerate(parts):
        if os.fork() == 0:
            status = 1
            try:
                _share(tree, names[n::cores], part)
                status = 0
            finally:
                os._exit(status)
    failed = sum(os.waitstatus_to_exitcode(os.wait()[1]) != 0 for _ in parts)
    with open(out_path, "wb") as out:
        for part in parts:
            with contextlib.suppress(FileNotFoundError):  # (a process that failed early)
                with open(part, "rb") as lines:
                    out.write(lines.read())
                os.remove(part)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
