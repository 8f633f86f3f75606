#!/usr/bin/env bash
# Prepare the gpt-oss recipe (Megatron-Bridge): install directory layout, login-node Python
# requirements into the active venv, the container image (enroot), the pinned repositories and
# the Hugging Face configs metadata.yaml names. The work is done by common/setup.sh.
#   ./setup.sh                                          directly (venv active, enroot here)
#   sbatch -A <account> -p <partition> ./setup.sh       on a compute node; the log is written
#                                                       to llmb-setup-gpt-oss_<jobid>.out in the
#                                                       submit directory
#SBATCH --job-name=llmb-setup-gpt-oss
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --time=02:00:00
#SBATCH --output=%x_%j.out
set -euo pipefail
# Under sbatch this file runs from a spool copy: look for the repository where sbatch was
# called too (the recipe folder or the repository root), or set LLMB_REPO.
for repo in "${LLMB_REPO:-}" "$(dirname "${BASH_SOURCE[0]}")/../.." ${SLURM_SUBMIT_DIR:+"${SLURM_SUBMIT_DIR}/../.." "${SLURM_SUBMIT_DIR}"}; do
    if [[ -n "${repo}" && -f "${repo}/common/setup.sh" && -f "${repo}/bridge/gpt-oss/metadata.yaml" ]]; then
        exec bash "${repo}/common/setup.sh" bridge/gpt-oss "$@"
    fi
done
echo "llmb: cannot find the llmb repository (common/setup.sh) from $0; set LLMB_REPO=/path/to/llmb" >&2
exit 1
