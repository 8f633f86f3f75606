#!/usr/bin/env bash
# Kimi-K2 pre-training on Megatron-Bridge: JOB_TOTAL_GPUS=<N> GPU_TYPE=<gpu> ./launch.sh (see README.md).
# Recipe identity, then hand-off: checks and normalisation live in common/lib.sh, validation and
# job building in llmb.launch.bridgejob, which reads metadata.yaml.
set -euo pipefail

RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=../../common/lib.sh
source "${RECIPE_DIR}/../../common/lib.sh"

LLMB_RECIPE_DIR="${RECIPE_DIR}" llmb_launch "${RECIPE_DIR}" pretrain_kimi-k2 ../entry.py "$@"
