#!/usr/bin/env bash
# The llmb installer (front): interactive, or headless with --config FILE; --dry-run prints the
# plan. The work is done by common/llmb/install/cli.py; see docs/installer.md.
# LLMB_PYTHON picks the Python that runs it (it needs PyYAML; default python3).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${LLMB_PYTHON:-python3}"
if ! "${python}" -c 'import yaml' >/dev/null 2>&1; then
    echo "llmb-install: LLMB_PYTHON=${python} cannot import yaml (PyYAML); install it (python3 -m pip install --user pyyaml) or set LLMB_PYTHON to a Python that has it" >&2
    exit 1
fi
LLMB_PYTHON="$(command -v "${python}")"
export LLMB_PYTHON
export PYTHONPATH="${repo}/common${PYTHONPATH:+:${PYTHONPATH}}"
exec "${LLMB_PYTHON}" -m llmb.install.cli "$@"
