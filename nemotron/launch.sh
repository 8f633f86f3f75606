#!/usr/bin/env bash
# Nemotron-4 pre-training benchmark: JOB_TOTAL_GPUS=<N> ./launch.sh (see README.md for every variable).
# Recipe identity, then hand-off: checks and normalisation live in common/lib.sh, validation and
# job building in the Python entrypoint (llmb.entrypoint), which reads metadata.yaml.
set -euo pipefail

RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=../common/lib.sh
source "${RECIPE_DIR}/../common/lib.sh"

llmb_launch "${RECIPE_DIR}" pretrain_nemotron4 pretrain_nemotron4.py "$@"
