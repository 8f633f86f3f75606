#!/usr/bin/env bats
# llama3.1/launch.sh: recipe-specific validation, DRY_RUN, and a submission through the sbatch shim.

bats_require_minimum_version 1.5.0
load launch_helpers

setup() {
    launch_setup
    LAUNCH="$REPO/llama3.1/launch.sh"
}

@test "HF_TOKEN is required (not for SMOKE_TEST)" {
    fails_with "HF_TOKEN is not set; llama3.1 needs a Hugging Face token" JOB_TOTAL_GPUS=16
    cd /
    run --separate-stderr env JOB_TOTAL_GPUS=2 CLUSTER_TYPE=local SMOKE_TEST=true DRY_RUN=true "$LAUNCH"
    [ "$status" -eq 0 ]
}

@test "scale outside the published matrix names the published scales" {
    fails_with "JOB_TOTAL_GPUS=24 is not a published scale for llama3.1 8b fp8 on h100; published: 8, 16, 32, 64, 128" \
        JOB_TOTAL_GPUS=24 HF_TOKEN=hf_abcdefghijklmnop
    fails_with "JOB_TOTAL_GPUS=256 is not a published scale for llama3.1 405b fp8 on h100; published: 32, 64, 128, 512, 1024, 2048" \
        JOB_TOTAL_GPUS=256 MODEL_SIZE=405b HF_TOKEN=hf_abcdefghijklmnop
}

@test "no gb200, no runai, no strong scaling for llama3.1" {
    fails_with "GPU_TYPE=gb200 is not supported by llama3.1; allowed: h100" JOB_TOTAL_GPUS=16 GPU_TYPE=gb200 HF_TOKEN=hf_abcdefghijklmnop
    fails_with "CLUSTER_TYPE=runai is not supported by llama3.1; allowed: slurm, local" JOB_TOTAL_GPUS=16 CLUSTER_TYPE=runai HF_TOKEN=hf_abcdefghijklmnop
    fails_with "STRONG_SCALING=true is not published for llama3.1 8b fp8 on h100; published: weak scaling" \
        JOB_TOTAL_GPUS=16 STRONG_SCALING=true HF_TOKEN=hf_abcdefghijklmnop
}

@test "DRY_RUN prints the job, never the token, and writes nothing" {
    cd /
    run --separate-stderr env JOB_TOTAL_GPUS=64 MODEL_SIZE=70B DTYPE=BF16 HF_TOKEN=hf_secret_token DRY_RUN=yes "$LAUNCH"
    [ "$status" -eq 0 ]
    [[ "$output" == *"#SBATCH --nodes=8"* ]]
    [[ "$output" == *"pretrain_llama3.1_70b_bf16_gpus64_tp4_pp4_cp2_vp5_mbs1_gbs128"* ]]
    [[ "$output" != *hf_secret_token* ]]
    [ ! -e "$SHIM_LOG" ]
    [ ! -e "$LLMB_INSTALL/workloads" ]
}

@test "submits through nemo-run; the token stays out of every file" {
    submits JOB_TOTAL_GPUS=16 HF_TOKEN=hf_secret_token ENABLE_CHECKPOINT=true
    run ! grep -rq hf_secret_token "$LLMB_INSTALL" "$SHIM_LOG"
    manifest=("$LLMB_INSTALL"/workloads/pretrain_llama3.1/experiments/pretrain_llama3.1_8b_fp8_gpus16_tp1_pp1_cp2_vpNone_mbs1_gbs256/*/llmb_manifest.json)
    [ -f "${manifest[0]}" ]
    grep -q '"checkpoint_save": true' "${manifest[0]}"
    grep -q -- '--gpus-per-node=8' "$SHIM_LOG"
}
