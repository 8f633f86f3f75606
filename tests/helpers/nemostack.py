"""Whether this venv has NeMo (nemo-toolkit): the default venv has not, `make test-nemo`'s
.venv-nemo has. Tests of what happens without NeMo skip themselves where it is installed."""

from __future__ import annotations

from importlib import metadata

NEMO_INSTALLED = "NeMo is installed here (the NeMo tier, make test-nemo)"


def have_nemo() -> bool:
    # By its distribution, not find_spec("nemo"): tests/nemo looks like a namespace package.
    try:
        return bool(metadata.version("nemo_toolkit"))
    except metadata.PackageNotFoundError:
        return False
