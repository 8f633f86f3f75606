#!/usr/bin/env bats
# common/lib.sh: the shared bash library of every launch.sh / setup.sh.

bats_require_minimum_version 1.5.0

setup() {
    REPO="$(cd "$BATS_TEST_DIRNAME/../.." && pwd)"
    # shellcheck source-path=SCRIPTDIR source=../../common/lib.sh
    source "$REPO/common/lib.sh"
}

@test "version check compares major and minor numerically" {
    llmb_version_at_least 4 2 4 2
    llmb_version_at_least 5 0 4 2
    llmb_version_at_least 10 0 4 2
    llmb_version_at_least 4 10 4 2
    run ! llmb_version_at_least 4 1 4 2
    run ! llmb_version_at_least 3 9 4 2
    run ! llmb_version_at_least 3 20 4 2
}

@test "llmb_check_bash passes on this bash and fails for an impossible minimum" {
    llmb_check_bash 4 2
    run --separate-stderr llmb_check_bash 99 0
    [ "$status" -eq 1 ]
    [[ "$stderr" == "llmb: bash ${BASH_VERSINFO[0]}.${BASH_VERSINFO[1]} is too old; llmb needs bash >= 99.0" ]]
}

@test "llmb_die prints one line on stderr and exits non-zero; llmb_warn carries on" {
    run --separate-stderr llmb_die "X=1 is bad; use 2"
    [ "$status" -eq 1 ]
    [ "$output" = "" ]
    [ "$stderr" = "llmb: X=1 is bad; use 2" ]
    run --separate-stderr llmb_warn "careful"
    [ "$status" -eq 0 ]
    [ "$stderr" = "llmb: warning: careful" ]
}

@test "booleans: every spelling, any case" {
    for v in true TRUE Yes y 1 on ON; do
        [ "$(llmb_bool_value X "$v")" = true ]
    done
    for v in false False NO n 0 off ""; do
        [ "$(llmb_bool_value X "$v")" = false ]
    done
    run --separate-stderr llmb_bool_value ENABLE_PROFILE maybe
    [ "$status" -eq 1 ]
    [[ "$stderr" == "llmb: ENABLE_PROFILE=maybe is not a boolean; use true or false"* ]]
}

@test "normalisation rewrites set variables and leaves unset ones unset" {
    DRY_RUN=YES
    ENABLE_PROFILE=Off
    unset SMOKE_TEST
    llmb_normalize_bool DRY_RUN ENABLE_PROFILE SMOKE_TEST
    [ "$DRY_RUN" = true ]
    [ "$ENABLE_PROFILE" = false ]
    [ -z "${SMOKE_TEST+set}" ]
}

@test "STAGE_PATH set is a migration error, in the words of llmb.layout" {
    export STAGE_PATH=/old/stage
    run --separate-stderr llmb_check_stage_path
    [ "$status" -eq 1 ]
    [[ "$stderr" == "llmb: STAGE_PATH=/old/stage is no longer used; unset it and set LLMB_INSTALL"* ]]
    python_words="$(PYTHONPATH="$REPO/common" python3 -c \
        'import sys; from llmb import layout; print(layout.stage_path_refusal(sys.argv[1]))' /old/stage)"
    [ "$stderr" = "llmb: ${python_words}" ]
    STAGE_PATH="" run --separate-stderr llmb_check_stage_path
    [ "$status" -eq 1 ]
    unset STAGE_PATH
    llmb_check_stage_path
}

@test "LLMB_INSTALL is required; LLMB_WORKLOAD is derived unless set" {
    unset LLMB_INSTALL LLMB_WORKLOAD
    run --separate-stderr llmb_require_install pretrain_x
    [ "$status" -eq 1 ]
    [[ "$stderr" == "llmb: LLMB_INSTALL is not set;"* ]]
    LLMB_INSTALL=/opt/llmb
    llmb_require_install pretrain_x
    [ "$LLMB_WORKLOAD" = /opt/llmb/workloads/pretrain_x ]
    LLMB_WORKLOAD=/elsewhere
    llmb_require_install pretrain_x
    [ "$LLMB_WORKLOAD" = /elsewhere ]
    cd "$BATS_TEST_TMPDIR"
    LLMB_INSTALL=rel
    unset LLMB_WORKLOAD
    llmb_require_install pretrain_x
    [ "$LLMB_INSTALL" = "$BATS_TEST_TMPDIR/rel" ]
}

@test "a venv or conda env must be active" {
    unset VIRTUAL_ENV CONDA_PREFIX
    LLMB_INSTALL=/opt/llmb
    run --separate-stderr llmb_check_venv pretrain_x
    [ "$status" -eq 1 ]
    [ "$stderr" = "llmb: no Python environment is active (VIRTUAL_ENV and CONDA_PREFIX are unset); run: source /opt/llmb/venvs/pretrain_x/bin/activate" ]
    CONDA_PREFIX=/opt/conda llmb_check_venv pretrain_x
    VIRTUAL_ENV=/opt/venv llmb_check_venv pretrain_x
}

@test "repository root is found from any directory" {
    cd /
    [ "$(llmb_repo_root)" = "$REPO" ]
}

@test "llmb_check_printable: a control character is one line, the value shown quoted" {
    # shellcheck disable=SC2034  # read by name (indirectly) by llmb_check_printable
    X=$'a\nb' Y=ok
    run --separate-stderr llmb_check_printable Y X
    [ "$status" -eq 1 ]
    [ "${#stderr_lines[@]}" -eq 1 ]
    [ "$stderr" = "llmb: X=\$'a\\nb' contains control character(s), which would end or garble a line of the job script; remove them" ]
    unset Z
    llmb_check_printable Y Z
}
