#!/usr/bin/env bash
# llmb shared bash library: sourced by every recipe's launch.sh and setup.sh.
#
# Generic helpers only: version check, error printing, value normalisation, the STAGE_PATH
# migration error, LLMB_INSTALL/LLMB_WORKLOAD derivation, the venv check, repository discovery.
# Bash never parses YAML here: anything that needs metadata.yaml is asked of Python.
#
# Every error is ONE line on stderr, prefixed "llmb: ", naming the variable, the bad value and
# what would work, followed by a non-zero exit.

# The directory that holds this file (<repo>/common), found from any current directory.
LLMB_LIB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# Print an error line and exit (status $2, default 1).
llmb_die() {
    printf 'llmb: %s\n' "$1" >&2
    exit "${2:-1}"
}

# Print a warning line; the caller carries on.
llmb_warn() {
    printf 'llmb: warning: %s\n' "$1" >&2
}

# llmb_check_printable NAME...: each named variable that is set must hold no control character
# (a newline in a value would add lines to the job script or to this error output). The value
# is shown quoted ($'a\nb') so that the error stays one line, and at most its first 60
# characters (with its length) so that it stays short.
llmb_check_printable() {
    local name value shown
    for name in "$@"; do
        value="${!name-}"
        if [[ "$value" == *[[:cntrl:]]* ]]; then
            shown="$(printf '%q' "${value:0:60}")"
            if ((${#value} > 60)); then
                shown="${shown}... (${#value} characters)"
            fi
            llmb_die "${name}=${shown} contains control character(s), which would end or garble a line of the job script; remove them"
        fi
    done
}

# llmb_version_at_least MAJOR MINOR WANT_MAJOR WANT_MINOR: true when MAJOR.MINOR >= WANT.
# Numeric on both parts, so 5.0 and 10.0 pass against 4.2 and 4.1 fails.
llmb_version_at_least() {
    local major="$1" minor="$2" want_major="$3" want_minor="$4"
    ((major > want_major || (major == want_major && minor >= want_minor)))
}

# llmb_check_bash [WANT_MAJOR WANT_MINOR]: this bash must be at least that (default 4.2).
llmb_check_bash() {
    local want_major="${1:-4}" want_minor="${2:-2}"
    if ! llmb_version_at_least "${BASH_VERSINFO[0]}" "${BASH_VERSINFO[1]}" \
        "$want_major" "$want_minor"; then
        llmb_die "bash ${BASH_VERSINFO[0]}.${BASH_VERSINFO[1]} is too old; llmb needs bash >= ${want_major}.${want_minor}"
    fi
}

# llmb_bool_value NAME VALUE: print "true" or "false" for a boolean spelling (any case):
# true/false, yes/no, y/n, 1/0, on/off; an empty VALUE is false. Anything else is an error.
llmb_bool_value() {
    local name="$1" value="${2:-}"
    case "${value,,}" in
        true | yes | y | 1 | on) printf 'true' ;;
        false | no | n | 0 | off | "") printf 'false' ;;
        *) llmb_die "${name}=${value} is not a boolean; use true or false (also yes/no, 1/0, on/off)" ;;
    esac
}

# llmb_normalize_bool NAME...: rewrite each named variable to "true"/"false" and export it.
# An unset variable stays unset (the caller's default applies).
llmb_normalize_bool() {
    local name value
    for name in "$@"; do
        if [[ -n "${!name+set}" ]]; then
            value="$(llmb_bool_value "$name" "${!name}")" || exit 1
            printf -v "$name" '%s' "$value"
            export "${name?}"
        fi
    done
}

# A set STAGE_PATH (even empty) means a setup from the older recipes: explain the move. The
# same words as llmb.layout.stage_path_refusal (tests/bats/lib.bats holds them equal).
llmb_check_stage_path() {
    if [[ -n "${STAGE_PATH+set}" ]]; then
        llmb_die "STAGE_PATH=${STAGE_PATH} is no longer used; unset it and set LLMB_INSTALL to your install root (images/, venvs/, workloads/ live under it; old STAGE_PATH/experiments can be moved to \$LLMB_INSTALL/workloads/<workload>/experiments)"
    fi
}

# llmb_require_install WORKLOAD_KEY: LLMB_INSTALL must be set; LLMB_WORKLOAD defaults to
# $LLMB_INSTALL/workloads/WORKLOAD_KEY. Both are exported as absolute paths.
llmb_require_install() {
    local key="$1"
    if [[ -z "${LLMB_INSTALL:-}" ]]; then
        llmb_die "LLMB_INSTALL is not set; set it to your install root, e.g. export LLMB_INSTALL=/lustre/\$USER/llmb (the installer prints it)"
    fi
    if [[ "$LLMB_INSTALL" != /* ]]; then
        LLMB_INSTALL="$(pwd)/${LLMB_INSTALL}"
    fi
    export LLMB_INSTALL
    if [[ -z "${LLMB_WORKLOAD:-}" ]]; then
        LLMB_WORKLOAD="${LLMB_INSTALL}/workloads/${key}"
    elif [[ "$LLMB_WORKLOAD" != /* ]]; then
        LLMB_WORKLOAD="$(pwd)/${LLMB_WORKLOAD}"
    fi
    export LLMB_WORKLOAD
}

# llmb_check_venv WORKLOAD_KEY: a Python virtual environment (venv or conda) must be active.
llmb_check_venv() {
    local key="$1"
    if [[ -z "${VIRTUAL_ENV:-}" && -z "${CONDA_PREFIX:-}" ]]; then
        llmb_die "no Python environment is active (VIRTUAL_ENV and CONDA_PREFIX are unset); run: source ${LLMB_INSTALL:-\$LLMB_INSTALL}/venvs/${key}/bin/activate"
    fi
}

# The repository root (the parent of common/).
llmb_repo_root() {
    dirname "$LLMB_LIB_DIR"
}

# Variables the launchers read: the booleans normalised once here; the choices below are
# case-insensitive too, but Python lower-cases them, so that a refusal quotes what was typed.
LLMB_BOOL_VARS=(
    DRY_RUN SMOKE_TEST STRONG_SCALING ENABLE_PROFILE ENABLE_GPU_METRICS ENABLE_NCCLTRACE
    ENABLE_CHECKPOINT
)
LLMB_CHOICE_VARS=(DTYPE MODEL_SIZE GPU_TYPE CLUSTER_TYPE)
# What bash itself reads or prints before handing off (Python checks every other variable).
LLMB_SHELL_VARS=(STAGE_PATH LLMB_INSTALL LLMB_WORKLOAD LLMB_PYTHON)

# llmb_launch RECIPE_DIR WORKLOAD_KEY ENTRYPOINT [ARGS...]: the whole of a launch.sh after its
# recipe identity: checks, normalisation, then hand-off to the recipe's Python entrypoint, which
# validates the request against metadata.yaml and builds/submits the nemo-run job.
llmb_launch() {
    local recipe_dir="$1" key="$2" entrypoint="$3"
    shift 3
    llmb_check_bash 4 2
    llmb_check_printable "${LLMB_SHELL_VARS[@]}" "${LLMB_BOOL_VARS[@]}" "${LLMB_CHOICE_VARS[@]}"
    llmb_check_stage_path
    llmb_normalize_bool "${LLMB_BOOL_VARS[@]}"
    llmb_require_install "$key"
    llmb_check_venv "$key"
    local python="${LLMB_PYTHON:-python3}"
    if ! command -v "$python" >/dev/null 2>&1; then
        llmb_die "LLMB_PYTHON=${python} is not on PATH; activate \$LLMB_INSTALL/venvs/${key}"
    fi
    # Variables of this environment that would make every bash of the job print or stop, or
    # the launcher wait at a prompt (llmb/shared/startvars.py; -E: the check ignores them).
    local refused
    if ! refused="$("$python" -E -S "${LLMB_LIB_DIR}/llmb/shared/startvars.py" inherited)"; then
        llmb_die "${refused:-cannot check the environment with ${python}}" 2
    fi
    exec "$python" "${recipe_dir}/${entrypoint}" "$@"
}
