#!/usr/bin/env bash
# make test-nemo: check the in-container half (common/llmb/container/train.py, nemorecipe.py) against the
# NeMo the benchmark image ships (nemo-toolkit 2.3.1, nemo-run 0.4.0), without a GPU.
#
# Creates or updates the .venv-nemo venv at the repository root with the versions pinned in
# common/requirements/nemo.lock (about 3 GB and 5 minutes the first time; skipped while nemo.txt
# and nemo.lock are unchanged; LLMB_NEMO_VENV=DIR uses another place, e.g. one venv for several
# checkouts), then runs pytest on tests/nemo: every
# published row's recipe, the fidelity table (tests/helpers/upstream_jobs.py) and the goldens of
# `train --print-config`. Arguments go to pytest (e.g. -k llama, -x). LLMB_UPDATE_GOLDEN=1
# rewrites the goldens under tests/nemo/golden. `--install-only` builds the venv and stops: CI
# (.ci/run) starts that beside `make test` (the install is mostly download and unpacking) and
# runs the tests after it.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${LLMB_NEMO_VENV:-$root/.venv-nemo}"
requirements="$root/common/requirements/nemo.txt"
lock="$root/common/requirements/nemo.lock"
stamp="$venv/.installed"

ensure_venv() {
    local python="${PYTHON:-python3}"
    if [[ -f "$stamp" && "$stamp" -nt "$requirements" && "$stamp" -nt "$lock" ]]; then
        return 0
    fi
    echo "test-nemo: installing $requirements into $venv (first time: minutes, ~3 GB)" >&2
    if [[ ! -x "$venv/bin/python" ]]; then
        "$python" -m venv "$venv"
    fi
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -c "$lock" -r "$requirements"
    # The torchvision that nvidia-modelopt pulls breaks `from nemo.collections import llm`
    # on this CPU-only torch; NeMo's LLM recipes do not need it.
    "$venv/bin/python" -m pip uninstall -q -y torchvision >/dev/null 2>&1 || true
    touch "$stamp"
}

main() {
    # one installer at a time: a second make test-nemo waits for the first, then finds it done
    exec 9>>"$venv.lock"
    if ! flock -w 1800 9; then
        echo "test-nemo: waited 1800 s for $venv.lock (another test-nemo is installing $venv);" \
            "let it finish, then run it again" >&2
        exit 1
    fi
    ensure_venv
    exec 9>&-
    if [[ "${1:-}" == "--install-only" ]]; then
        return 0
    fi
    cd "$root"
    # No GPU here: keep NeMo and Lightning from probing for one and HF from going online.
    CUDA_VISIBLE_DEVICES="" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
        "$venv/bin/python" -m pytest -q -p no:cacheprovider -m nemo tests/nemo "$@"
}

main "$@"
