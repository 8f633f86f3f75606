#!/usr/bin/env bash
# make demo: the whole path on this machine, no Slurm, no GPU, no root.
# Runs Llama 3.1's smoke benchmark (a tiny real PyTorch training loop that prints NeMo's log
# lines) with CLUSTER_TYPE=local: nemo-run's local executor starts 2 torchrun processes, the
# log lands in the same experiments layout a cluster run uses, and the analyzer reads it.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-${REPO}/.venv}"
DEMO_DIR="${LLMB_DEMO_DIR:-${REPO}/demo}"
RECIPE="${DEMO_RECIPE:-llama3.1}"

say() { printf '\n==> %s\n' "$*"; }

if [[ ! -x "${VENV}/bin/python" ]] || ! "${VENV}/bin/python" -c 'import nemo_run, torch' 2>/dev/null; then
    say "Creating ${VENV} (nemo-run for the launcher, CPU torch for the smoke workload)"
    [[ -x "${VENV}/bin/python" ]] || python3 -m venv "$VENV"
    "${VENV}/bin/python" -m pip install -q --disable-pip-version-check \
        -r "${REPO}/common/requirements/launch.txt" -r "${REPO}/common/requirements/smoke.txt"
fi
# What `source $VENV/bin/activate` does, for this script only.
export VIRTUAL_ENV="$VENV" PATH="${VENV}/bin:${PATH}"
unset STAGE_PATH LLMB_WORKLOAD

export LLMB_INSTALL="${DEMO_DIR}/llmb-install"
mkdir -p "$LLMB_INSTALL"
workload="$("${VENV}/bin/python" -c 'import sys; sys.path.insert(0, sys.argv[1] + "/common")
from llmb.recipes import catalog; print(catalog.find_recipe(sys.argv[2]).workload)' "$REPO" "$RECIPE")"
experiments="${LLMB_INSTALL}/workloads/${workload}/experiments"

say "Running the ${RECIPE} smoke benchmark locally: 2 processes, ${MAX_STEPS:-50} steps"
CLUSTER_TYPE=local SMOKE_TEST=true JOB_TOTAL_GPUS=2 GPUS_PER_NODE=2 \
    MAX_STEPS="${MAX_STEPS:-50}" "${REPO}/${RECIPE}/launch.sh"

say "Analyzing ${experiments}"
"${REPO}/common/parse_train_timing.sh" "$experiments"

cat <<EOT

==> Next, on a real cluster (Slurm with enroot/pyxis):
    1. Install once:   ${REPO}/installer/install.sh      (or: sbatch ${RECIPE}/setup.sh)
    2. Run at a published scale, e.g.:
         source \$LLMB_INSTALL/venvs/${workload}/bin/activate
         export SBATCH_ACCOUNT=<account> SBATCH_PARTITION=<partition>
         JOB_TOTAL_GPUS=16 ${REPO}/${RECIPE}/launch.sh
    3. Compare with the published reference:
         ${REPO}/common/parse_train_timing.sh \$LLMB_WORKLOAD/experiments
    The smoke numbers above measure a tiny CPU model: they prove the pipeline, not a GPU.
EOT
