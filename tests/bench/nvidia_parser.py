"""Run NVIDIA llmb-run's own log parser over a tree, one process (the bench's other reader).

    LLMB_BENCH_NVIDIA_PARSER=/path/to/pretrain_log_parser.py \
        python tests/bench/nvidia_parser.py FRAMEWORK TREE

FRAMEWORK is what llmb-run passes it for a workload (`nemo2`, `megatron_bridge`). The parser is
NVIDIA's (NVIDIA/dgxc-benchmarking, cli/llmb-run/src/llmb_run/pretrain_log_parser.py, with its
sibling job_logs.py beside it); none of its code is in this repository: fetch it yourself and
name the file in the variable. Loaded from that file without importing llmb-run's CLI (typer,
rich). Every `log-*.out` under TREE is parsed (the files llmb-run's find_job_logs matches), and
the count per status is printed.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from collections import Counter
from pathlib import Path

VARIABLE = "LLMB_BENCH_NVIDIA_PARSER"


def load(parser: Path) -> types.ModuleType:
    """The parser module, its `llmb_run.job_logs` import served from the file beside it."""
    package = types.ModuleType("llmb_run")
    package.__path__ = [str(parser.parent)]
    sys.modules["llmb_run"] = package
    spec = importlib.util.spec_from_file_location("llmb_run.pretrain_log_parser", parser)
    if spec is None or spec.loader is None:
        raise ImportError(f"{VARIABLE}={parser} cannot be loaded as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    framework, tree = argv
    parser = Path(os.environ.get(VARIABLE, ""))
    if not parser.is_file():
        print(f"{VARIABLE}={parser} is not a file; point it at llmb-run's "
              "pretrain_log_parser.py", file=sys.stderr)
        return 2
    module = load(parser)
    statuses: Counter[str] = Counter()
    for folder, _dirs, names in os.walk(tree):
        for name in names:
            if name.startswith("log-") and name.endswith(".out"):
                result = module.parse_pretrain_log(os.path.join(folder, name), framework)
                statuses[result.status.value] += 1
    print(" ".join(f"{status}={count}" for status, count in sorted(statuses.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
