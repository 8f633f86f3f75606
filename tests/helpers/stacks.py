"""The heavy stacks llmb imports only where it needs them (NeMo, nemo-run, fiddle, torch, ...):
whether this venv has NeMo, and which of them a fresh interpreter imported.

The default venv has no NeMo; `make test-nemo`'s .venv-nemo has. Tests of what happens without
NeMo skip themselves where it is installed (`have_nemo`, reason NEMO_INSTALLED).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from importlib import metadata

from paths import COMMON

HEAVY = ("nemo", "nemo_run", "fiddle", "torch", "torchx", "lightning", "megatron", "matplotlib",
         "numpy")
NEMO_INSTALLED = "NeMo is installed here (the NeMo tier, make test-nemo)"
_PROBE = ("\nimport json as _json, sys as _sys\n"
          f"print(_json.dumps(sorted(m for m in {HEAVY!r} if m in _sys.modules)))\n"
          "_sys.exit(globals().get('status', 0))\n")


def have_nemo() -> bool:
    # By its distribution, not find_spec("nemo"): tests/nemo looks like a namespace package.
    try:
        return bool(metadata.version("nemo_toolkit"))
    except metadata.PackageNotFoundError:
        return False


def fresh_python(code: str, env: Mapping[str, str] | None = None
                 ) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run `code` in a new interpreter with common/ on its path; its exit status is the
    variable `status` the code sets (0 if none). Returns the process, its stdout without the
    last line, and the heavy stacks imported by the end (that last line)."""
    full_env = {"PATH": os.environ["PATH"], **(env or {}), "PYTHONPATH": str(COMMON)}
    done = subprocess.run([sys.executable, "-c", code + _PROBE], capture_output=True, text=True,
                          timeout=120, env=full_env, check=False)
    *out, last = done.stdout.splitlines() or [""]
    done.stdout = "".join(line + "\n" for line in out)
    return done, json.loads(last) if last.startswith("[") else []
