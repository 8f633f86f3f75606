"""The analyzer as users run it: `python -m llmb.analysis.cli ARGS` in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from paths import COMMON


def run_analyzer(args: Sequence[str], cwd: Path | None = None, timeout: float = 120,
                 env: Mapping[str, str] | None = None,
                 **kw: Any) -> subprocess.CompletedProcess[str]:
    """Run the analyzer CLI; `env` adds to (or replaces names of) this process's environment."""
    full_env = {**os.environ, "PYTHONPATH": str(COMMON), **(env or {})}
    return subprocess.run([sys.executable, "-m", "llmb.analysis.cli", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout, **kw)
