"""Where things are in the repository, for every test."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMMON = REPO / "common"
TESTS = REPO / "tests"
FIXTURES = TESTS / "fixtures"
LOGS = FIXTURES / "logs"
SEEDS = FIXTURES / "seeds"
GOLDEN = TESTS / "golden"
SHIMS = TESTS / "shims"  # test doubles of enroot and Slurm's commands
E2E_BIN = TESTS / "e2e" / "bin"  # test doubles of numactl and nvidia-smi
