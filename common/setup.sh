#!/usr/bin/env bash
# The one setup implementation behind every <recipe>/setup.sh:
#
#   bash common/setup.sh <recipe>        (what llama3.1/setup.sh etc. exec; <recipe> is the
#                                         recipe's folder under the repository: llama3.1,
#                                         bridge/llama3.1)
#   bash common/setup.sh --fetch-sources DIR <recipe>...
#                                         on a machine with network: fill DIR with what the
#                                         sources step needs (git mirrors, Hugging Face
#                                         configs), for every GPU type; then LLMB_SOURCES=DIR
#
# Steps (LLMB_SETUP_STEPS, comma separated, default "venv,sources,image"; "venv,sources" for
# CLUSTER_TYPE=runai, where Run:ai pulls the image itself):
#   layout  always: $LLMB_INSTALL/{images,datasets,venvs,workloads/<workload>}
#   venv    pip install the login-node requirements into the ACTIVE venv or conda env
#   sources the recipe's pinned `repositories` (those of GPU_TYPE) cloned at their commits into
#           $LLMB_INSTALL/workloads/<workload>/<name> (Megatron-Bridge, Run); NeMo-Run
#           pip-installed from its checkout into the active venv; each `downloads.huggingface`
#           config.json into HF_HOME=$LLMB_INSTALL/.cache/huggingface, with HF_TOKEN or
#           $LLMB_INSTALL/.hf_token (never printed). A checkout at another commit is refused,
#           never replaced. Nothing to do for a recipe without them (llmb.install.sources).
#   image   enroot import the recipe's image to $LLMB_INSTALL/images/<org>+<name>+<tag>.sqsh,
#           via a temporary name (.<file>.partial.<host>.<pid>) that is renamed only when the
#           import completed; an existing valid image is kept. A partial file whose setup
#           process is gone (killed by SIGKILL or with its node: no trap ran) is removed.
#           GPU_TYPE=gb200 imports the aarch64 image (enroot --arch).
# Safe to run twice. Every value is checked before anything is written: no control
# characters, and on Slurm/Run:ai an LLMB_INSTALL the launchers can use. Variables:
#   LLMB_INSTALL (required)  STAGE_PATH (must be unset: the old name)  CLUSTER_TYPE  GPU_TYPE
#   LLMB_REQUIREMENTS   requirement files, ':' separated (default common/requirements/launch.txt)
#   LLMB_PIP_ARGS       extra pip arguments, e.g. "--no-index --find-links /wheels"
#   LLMB_IMAGE_SPACE_GB free space the import needs (default: the documented estimate, 30)
#   LLMB_SOURCES        a folder --fetch-sources filled: the sources step uses no network
#   HF_ENDPOINT         the Hugging Face Hub (default https://huggingface.co)
set -euo pipefail
# What this script reads; none may hold a control character.
SETUP_VARS=(LLMB_INSTALL STAGE_PATH CLUSTER_TYPE GPU_TYPE LLMB_SETUP_STEPS LLMB_REQUIREMENTS
    LLMB_PIP_ARGS LLMB_IMAGE_SPACE_GB LLMB_PYTHON LLMB_SOURCES HF_ENDPOINT)

SETUP_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly SETUP_REPO
SETUP_TMP_IMAGE=""
SETUP_IMPORT_PID=""
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "${SETUP_REPO}/common/lib.sh"

setup_log() {
    echo "llmb-setup: $*"
}

# The Python that answers questions about metadata.yaml: the active environment's if it has
# PyYAML, else the workload venv's, else python3.
setup_python() {
    local workload="$1" candidate
    for candidate in "${LLMB_PYTHON:-}" "${VIRTUAL_ENV:+${VIRTUAL_ENV}/bin/python}" \
        "${CONDA_PREFIX:+${CONDA_PREFIX}/bin/python}" \
        "${LLMB_INSTALL:+${LLMB_INSTALL}/venvs/${workload}/bin/python}" python3; do
        [[ -n "${candidate}" ]] || continue
        if "${candidate}" -c 'import yaml' >/dev/null 2>&1; then
            echo "${candidate}"
            return 0
        fi
    done
    llmb_die "no Python with PyYAML found (tried the active venv, ${LLMB_INSTALL:-\$LLMB_INSTALL}/venvs/${workload} and python3); activate the workload venv or set LLMB_PYTHON"
}

# setup_recipe_dir RECIPE: the recipe's folder: RECIPE itself when absolute (a recipe kept
# outside the repository), else the repository's folder of that name.
setup_recipe_dir() {
    if [[ "$1" == /* ]]; then
        printf '%s' "$1"
    else
        printf '%s' "${SETUP_REPO}/$1"
    fi
}

setup_check_env() {
    local recipe="$1"
    llmb_check_printable "${SETUP_VARS[@]}"
    llmb_check_stage_path
    if [[ -z "${LLMB_INSTALL:-}" ]]; then
        llmb_die "LLMB_INSTALL is not set; export LLMB_INSTALL=/path/on/a/shared/filesystem"
    fi
    if [[ ! -f "$(setup_recipe_dir "${recipe}")/metadata.yaml" ]]; then
        llmb_die "recipe=${recipe} has no $(setup_recipe_dir "${recipe}")/metadata.yaml"
    fi
    case "${CLUSTER_TYPE:-slurm}" in
        slurm | runai | local) ;;
        *) llmb_die "CLUSTER_TYPE=${CLUSTER_TYPE} is not supported; allowed: slurm, runai, local" ;;
    esac
    # Plain decimal only: bash arithmetic reads 010 as octal 8, and 30 digits overflow.
    if [[ -n "${LLMB_IMAGE_SPACE_GB:-}" && ! "${LLMB_IMAGE_SPACE_GB}" =~ ^(0|[1-9][0-9]{0,5})$ ]]; then
        llmb_die "LLMB_IMAGE_SPACE_GB=${LLMB_IMAGE_SPACE_GB} is not a whole number of GB (0 to 999999, no leading zeros)"
    fi
}

# setup_install_dir: LLMB_INSTALL made absolute and created. On Slurm and Run:ai the launchers
# put run directories under it, which nemo-run hands to a shell: llmb.shared.shellsafe says which
# characters it may hold (the same rule launch.sh applies), before anything is created.
setup_install_dir() {
    local dir="${LLMB_INSTALL}" err
    [[ "${dir}" == /* ]] || dir="${PWD}/${dir}"
    if [[ "${CLUSTER_TYPE:-slurm}" != local ]]; then
        PYTHONPATH="${SETUP_REPO}/common" "${LLMB_PYTHON:-python3}" -m llmb.shared.shellsafe job-path \
            LLMB_INSTALL "${dir}" || exit 1
    fi
    if [[ -e "${dir}" && ! -d "${dir}" ]]; then
        llmb_die "LLMB_INSTALL=${dir} is a file, not a directory; set it to your install root"
    fi
    if ! err="$(mkdir -p -- "${dir}" 2>&1)"; then
        llmb_die "LLMB_INSTALL=${dir} cannot be created: ${err##*: }"
    fi
    LLMB_INSTALL="$(cd "${dir}" && pwd)"
    export LLMB_INSTALL
}

# Fills the global SETUP_STEPS from LLMB_SETUP_STEPS (in this shell, so that its error exits).
SETUP_STEPS=()
setup_steps() {
    local steps="${LLMB_SETUP_STEPS:-}" step
    if [[ -z "${steps}" ]]; then
        if [[ "${CLUSTER_TYPE:-slurm}" == runai ]]; then
            steps=venv,sources
        else
            steps=venv,sources,image
        fi
    fi
    local -a words=()
    IFS=', ' read -r -a words <<<"${steps}"  # read -a: no glob expansion of a '*'
    for step in "${words[@]}"; do
        case "${step}" in
            venv | sources | image) SETUP_STEPS+=("${step}") ;;
            *) llmb_die "LLMB_SETUP_STEPS=${LLMB_SETUP_STEPS} has unknown step ${step}; allowed: venv, sources, image" ;;
        esac
    done
    ((${#SETUP_STEPS[@]})) || llmb_die "LLMB_SETUP_STEPS=${LLMB_SETUP_STEPS:-} selects no step; allowed: venv, sources, image"
}

setup_layout() {
    local workload="$1" dir
    for dir in images datasets venvs "workloads/${workload}"; do
        mkdir -p "${LLMB_INSTALL}/${dir}"
    done
    setup_log "layout ready under ${LLMB_INSTALL}"
}

setup_venv() {
    local recipe="$1" prefix python file
    local -a reqs=() pip_args=()
    prefix="${VIRTUAL_ENV:-${CONDA_PREFIX:-}}"
    if [[ -z "${prefix}" ]]; then
        llmb_die "no Python venv is active (VIRTUAL_ENV and CONDA_PREFIX are unset); activate the workload venv first (source ${LLMB_INSTALL}/venvs/<workload>/bin/activate, or conda activate before running ${recipe}/setup.sh), or set LLMB_SETUP_STEPS=image"
    fi
    python="${prefix}/bin/python"
    [[ -x "${python}" ]] || llmb_die "VIRTUAL_ENV=${prefix} has no bin/python; activate a working venv"
    IFS=: read -r -a reqs <<<"${LLMB_REQUIREMENTS:-${SETUP_REPO}/common/requirements/launch.txt}"
    for file in "${reqs[@]}"; do
        [[ -f "${file}" ]] || llmb_die "LLMB_REQUIREMENTS names ${file}, which does not exist"
        pip_args+=(-r "${file}")
    done
    local -a extra=()
    read -r -a extra <<<"${LLMB_PIP_ARGS:-}"  # words, never glob-expanded
    pip_args+=("${extra[@]}")
    setup_log "installing ${reqs[*]} into ${prefix}"
    "${python}" -m pip install --disable-pip-version-check -q "${pip_args[@]}"
}

# A file is a valid image when it is a non-empty squashfs (magic "hsqs").
setup_image_valid() {
    local file="$1" magic
    [[ -s "${file}" ]] || return 1
    magic="$(head -c 4 "${file}" 2>/dev/null)" || return 1
    [[ "${magic}" == hsqs ]]
}

setup_host() {
    printf '%s' "${HOSTNAME:-$(hostname)}"
}

# setup_alive PID: that process exists here and is a setup (not a reused PID).
setup_alive() {
    local pid="$1" cmdline
    [[ -r "/proc/${pid}/cmdline" ]] || return 1
    cmdline="$(tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null)" || return 1
    [[ "${cmdline}" == *setup.sh* ]]
}

# setup_clean_partials IMAGES FILE: remove .FILE.partial.<host>.<pid> left by a setup on this
# host whose process is gone; one from another host is named and kept (it may be running).
setup_clean_partials() {
    local images="$1" file="$2" partial rest host pid
    for partial in "${images}/.${file}.partial."*; do
        [[ -e "${partial}" ]] || continue
        rest="${partial##*/."${file}".partial.}"
        pid="${rest##*.}" host="${rest%.*}"
        if [[ "${rest}" != *.* ]]; then  # the older name, .FILE.partial.<pid>
            pid="${rest}" host="$(setup_host)"
        fi
        if [[ ! "${pid}" =~ ^[0-9]+$ ]]; then
            continue
        elif [[ "${host}" != "$(setup_host)" ]]; then
            llmb_warn "${partial} is a partial import by process ${pid} on ${host}; kept (remove it if no setup runs there)"
        elif setup_alive "${pid}"; then
            llmb_warn "${partial} is being written by setup process ${pid}; kept"
        else
            rm -f -- "${partial}"
            setup_log "removed ${partial}: a partial import left by process ${pid}, which is gone"
        fi
    done
}

setup_cleanup() {
    if [[ -n "${SETUP_IMPORT_PID}" ]]; then
        kill -TERM "${SETUP_IMPORT_PID}" 2>/dev/null || true
        wait "${SETUP_IMPORT_PID}" 2>/dev/null || true
    fi
    if [[ -n "${SETUP_TMP_IMAGE}" ]]; then
        rm -f "${SETUP_TMP_IMAGE}"
    fi
}

# setup_image PYTHON URI FILE ARCH ESTIMATE: the image `llmb.install.sources facts` names for
# GPU_TYPE (a recipe's gpu_overrides may name another).
setup_image() {
    local python="$1" uri="$2" file="$3" arch="$4" estimate="$5" need_gb images target avail_kb
    local -a arch_args=()
    command -v enroot >/dev/null 2>&1 \
        || llmb_die "enroot is not installed on $(hostname); run the image step on a node with enroot (sbatch setup.sh, or srun ... with LLMB_SETUP_STEPS=image), or set CLUSTER_TYPE=runai"
    images="${LLMB_INSTALL}/images"
    target="${images}/${file}"
    if setup_image_valid "${target}"; then
        setup_log "image ${target} already present; kept"
        return 0
    fi
    need_gb="${LLMB_IMAGE_SPACE_GB:-${estimate}}"
    avail_kb="$(df -Pk "${images}" | awk 'NR == 2 {print $4}')"
    if ((avail_kb < need_gb * 1024 * 1024)); then
        llmb_die "not enough disk space for the image in ${images}: $((avail_kb / 1024 / 1024)) GB free, ${need_gb} GB needed (LLMB_IMAGE_SPACE_GB overrides the estimate)"
    fi
    if [[ -n "${arch}" ]]; then
        arch_args=(--arch "${arch}")
    fi
    setup_clean_partials "${images}" "${file}"
    # The temporary name neither ends in .sqsh nor is visible: an interrupted import leaves
    # nothing that looks like an image, and the trap removes even that; what a SIGKILL leaves,
    # the next setup on this host removes (setup_clean_partials).
    SETUP_TMP_IMAGE="${images}/.${file}.partial.$(setup_host).$$"
    rm -f "${SETUP_TMP_IMAGE}"
    trap setup_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    setup_log "importing ${uri} to ${target}"
    # In the background so that a signal is handled at once, not after the import. Through
    # llmb.shared.progress: a live line on a terminal, plain lines in a batch job's output; it passes
    # a TERM on to enroot and waits for it.
    PYTHONPATH="${SETUP_REPO}/common" "${python}" -m llmb.shared.progress "llmb-setup: image import" -- \
        enroot import "${arch_args[@]}" --output "${SETUP_TMP_IMAGE}" "${uri}" &
    SETUP_IMPORT_PID=$!
    if ! wait "${SETUP_IMPORT_PID}"; then
        SETUP_IMPORT_PID=""
        llmb_die "enroot import ${uri} failed; nothing was written to ${target}"
    fi
    SETUP_IMPORT_PID=""
    setup_image_valid "${SETUP_TMP_IMAGE}" \
        || llmb_die "enroot import ${uri} produced no valid squashfs image; nothing was written to ${target}"
    mv -f "${SETUP_TMP_IMAGE}" "${target}"
    SETUP_TMP_IMAGE=""
    setup_log "image ready: ${target}"
}

# setup_sources PYTHON RECIPE: the sources step (llmb.install.sources prints its own one-line
# error); NeMo-Run goes into the active venv.
setup_sources() {
    local python="$1" recipe="$2" prefix
    local -a venv_python=()
    prefix="${VIRTUAL_ENV:-${CONDA_PREFIX:-}}"
    if [[ -n "${prefix}" ]]; then
        venv_python=(--python "${prefix}/bin/python")
    fi
    PYTHONPATH="${SETUP_REPO}/common" "${python}" -m llmb.install.sources prepare \
        "$(setup_recipe_dir "${recipe}")" "${GPU_TYPE:-}" "${venv_python[@]}" || exit 1
}

# setup_fetch_sources DIR RECIPE...: fill DIR for LLMB_SOURCES (needs the network, not LLMB_INSTALL).
setup_fetch_sources() {
    local dir="${1:-}" recipe python
    shift || true
    [[ -n "${dir}" && $# -gt 0 ]] || llmb_die "usage: common/setup.sh --fetch-sources DIR <recipe>... (e.g. bridge/llama3.1)"
    llmb_check_printable "${SETUP_VARS[@]}"
    if [[ "${dir}" == *[[:cntrl:]]* ]]; then
        llmb_die "--fetch-sources DIR=$(printf '%q' "${dir:0:60}") contains control character(s); give a plain folder path"
    fi
    local -a dirs=()
    for recipe in "$@"; do
        llmb_check_printable recipe
        dirs+=("$(setup_recipe_dir "${recipe}")")
        [[ -f "${dirs[-1]}/metadata.yaml" ]] \
            || llmb_die "recipe=${recipe} has no ${dirs[-1]}/metadata.yaml"
    done
    python="$(setup_python "${1}")"
    PYTHONPATH="${SETUP_REPO}/common" "${python}" -m llmb.install.sources fill "${dir}" "${dirs[@]}" \
        || exit 1
}

setup_main() {
    local recipe="${1:-}" workload python step answer
    local -a facts=()
    if [[ "${recipe}" == --fetch-sources ]]; then
        shift
        setup_fetch_sources "$@"
        return 0
    fi
    [[ -n "${recipe}" ]] || llmb_die "usage: common/setup.sh <recipe> (llama3.1, nemotron, nemotronh, bridge/<name>) | --fetch-sources DIR <recipe>..."
    setup_check_env "${recipe}"
    setup_steps
    setup_install_dir
    for step in "${SETUP_STEPS[@]}"; do
        if [[ "${step}" == venv ]]; then
            setup_venv "${recipe}"
        fi
    done
    # The workload key (pretrain_nemotron4 for nemotron/) and GPU_TYPE's image come from the
    # recipe's metadata.yaml, asked once the venv step has made PyYAML available
    # (llmb.install.sources prints its own one-line error, e.g. an unknown GPU_TYPE).
    python="$(setup_python "${recipe}")"
    answer="$(PYTHONPATH="${SETUP_REPO}/common" "${python}" -m llmb.install.sources facts \
        "$(setup_recipe_dir "${recipe}")" "${GPU_TYPE:-}")" || exit 1
    mapfile -t facts <<<"${answer}"
    workload="${facts[0]}"
    setup_layout "${workload}"
    for step in "${SETUP_STEPS[@]}"; do
        case "${step}" in
            sources) setup_sources "${python}" "${recipe}" ;;
            image) setup_image "${python}" "${facts[2]}" "${facts[3]}" "${facts[4]}" "${facts[5]}" ;;
        esac
    done
    setup_log "done: ${recipe} (${workload}) steps: ${SETUP_STEPS[*]}"
}

setup_main "$@"
