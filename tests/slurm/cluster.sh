#!/usr/bin/env bash
# A throw-away, real Slurm cluster on this host, for tests.
#
#   bash tests/slurm/cluster.sh install  install the Debian packages only (make test runs it
#                                        once, before its workers start clusters)
#   bash tests/slurm/cluster.sh up       start (idempotent; quick no-op when healthy)
#   bash tests/slurm/cluster.sh down     stop what `up` started (add --purge to delete the state dir)
#   bash tests/slurm/cluster.sh status   print daemon and node state
#   bash tests/slurm/cluster.sh env      print `export` lines for clients: eval "$(... env)"
#
# One slurmctld, LLMB_SLURM_NODES slurmd (default 2: node1, node2) on 127.0.0.1
# with 16 CPUs and 8 fake GPUs each, a private munged, partition `batch` with
# every node, no accounting, and a SPANK test double for pyxis
# (spank_pyxis_stub.c). LLMB_SLURM_LEAVES=L (default 0: none) gives the nodes a
# switch topology (topology/tree): L leaf switches of N/L consecutive nodes each
# (leaf1 over node1.., leaf2 ...) under one spine. All state lives under
# $LLMB_SLURM_STATE (default /tmp/llmb-slurm). See tests/slurm/README.md.
#
# Exit codes: 0 ok; 1 failure; 2 usage (or a bad LLMB_SLURM_NODES or
# LLMB_SLURM_LEAVES); 3 `status`:
# not running or unhealthy; 77 skipped: not root (the cluster needs root).
set -euo pipefail

readonly EXIT_FAIL=1
readonly EXIT_USAGE=2
readonly EXIT_NOT_RUNNING=3
readonly EXIT_SKIP=77

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly SCRIPT_DIR
STATE="${LLMB_SLURM_STATE:-/tmp/llmb-slurm}"
STATE="${STATE%/}"
readonly STATE
readonly PORT_BASE="${LLMB_SLURM_PORT_BASE:-16817}"
readonly START_TIMEOUT="${LLMB_SLURM_START_TIMEOUT:-30}"
readonly MAX_NODES=16
NODE_COUNT="${LLMB_SLURM_NODES:-2}"
if ! [[ "${NODE_COUNT}" =~ ^[1-9][0-9]*$ ]] || ((NODE_COUNT > MAX_NODES)); then
    printf 'llmb-slurm: LLMB_SLURM_NODES=%q is not a node count; give a whole number from 1 to %d (default 2)\n' \
        "${NODE_COUNT}" "${MAX_NODES}" >&2
    exit "${EXIT_USAGE}"
fi
LEAVES="${LLMB_SLURM_LEAVES:-0}"
if ! [[ "${LEAVES}" =~ ^(0|[1-9][0-9]*)$ ]] || ((LEAVES > NODE_COUNT || (LEAVES > 0 && NODE_COUNT % LEAVES != 0))); then
    printf 'llmb-slurm: LLMB_SLURM_LEAVES=%q is not a leaf switch count for %d node(s); give 0 (no topology) or a whole number that divides the node count\n' \
        "${LEAVES}" "${NODE_COUNT}" >&2
    exit "${EXIT_USAGE}"
fi
NODES=()
for ((i = 1; i <= NODE_COUNT; i++)); do
    NODES+=("node${i}")
done
readonly NODE_COUNT
readonly GPUS_PER_NODE=8
readonly CPUS_PER_NODE=16
readonly CONF="${STATE}/etc/slurm.conf"
# Slurm reads topology.conf from slurm.conf's folder
readonly TOPOLOGY_CONF="${STATE}/etc/topology.conf"
readonly MUNGE_SOCKET="${STATE}/munge/munge.socket.2"
readonly PACKAGES=(slurmctld slurmd slurm-client munge libslurm-dev libpmix-dev gcc libc6-dev)
# Clients that do not get SLURM_CONF (e.g. an srun inside a job submitted
# without it) read /etc/slurm/slurm.conf: link it to ours when that path is
# free. Set LLMB_SLURM_SYSTEM_CONF=0 to never touch /etc.
readonly SYSTEM_CONF=/etc/slurm/slurm.conf
readonly LINK_SYSTEM_CONF="${LLMB_SLURM_SYSTEM_CONF:-1}"

export SLURM_CONF="${CONF}"

log() { printf 'llmb-slurm: %s\n' "$*" >&2; }

usage() {
    cat >&2 <<EOF
usage: bash tests/slurm/cluster.sh {install|up|down [--purge]|status|env}
state dir: ${STATE} (LLMB_SLURM_STATE)
EOF
}

require_root() {
    local what="$1"
    if [[ "$(id -u)" -ne 0 ]]; then
        echo "skipped: the test Slurm cluster needs root (${what}: it installs Debian packages, runs slurmd/munged as root and bind-mounts in job tasks)"
        exit "${EXIT_SKIP}"
    fi
}

# ---------------------------------------------------------------- processes

# Print the PID recorded in pid file $1 if that process is alive and its
# command name is $2; nothing otherwise.
pid_from_file() {
    local file="$1" comm="$2" pid
    [[ -s "${file}" ]] || return 0
    pid="$(tr -dc '0-9' <"${file}")"
    [[ -n "${pid}" && -r "/proc/${pid}/comm" ]] || return 0
    [[ "$(cat "/proc/${pid}/comm" 2>/dev/null)" == "${comm}" ]] || return 0
    echo "${pid}"
}

daemon_pidfiles() {
    local node
    echo "${STATE}/run/munged.pid munged"
    echo "${STATE}/run/slurmctld.pid slurmctld"
    for node in "${NODES[@]}"; do
        echo "${STATE}/run/slurmd-${node}.pid slurmd"
    done
}

# PIDs of the processes named $1 that belong to this cluster: found by
# SLURM_CONF=${CONF} in their environment, which every daemon inherits from
# this script and every slurmstepd from our slurmd. Unlike a pid file, this
# also finds a daemon whose pid file was lost or overwritten (two racing `up`s).
ours_named() {
    local comm="$1" env_file pid
    for env_file in /proc/[0-9]*/environ; do
        pid="${env_file#/proc/}"
        pid="${pid%/environ}"
        [[ "$(cat "/proc/${pid}/comm" 2>/dev/null)" == "${comm}" ]] || continue
        if tr '\0' '\n' <"${env_file}" 2>/dev/null | grep -qxF "SLURM_CONF=${CONF}"; then
            echo "${pid}"
        fi
    done
}

# Our slurmstepd processes and all their descendants.
our_step_pids() {
    local pid stepds=() all=() frontier=() next=() child ppid stat
    mapfile -t stepds < <(ours_named slurmstepd)
    ((${#stepds[@]})) || return 0
    all=("${stepds[@]}")
    frontier=("${stepds[@]}")
    while ((${#frontier[@]})); do
        next=()
        for stat in /proc/[0-9]*/stat; do
            child="${stat#/proc/}"
            child="${child%/stat}"
            # field 4 of /proc/PID/stat, after the parenthesised command name
            ppid="$(sed -E 's/^.*\) [A-Za-z] ([0-9]+) .*$/\1/' "${stat}" 2>/dev/null)" || continue
            for pid in "${frontier[@]}"; do
                if [[ "${ppid}" == "${pid}" ]]; then
                    next+=("${child}")
                fi
            done
        done
        ((${#next[@]})) || break
        all+=("${next[@]}")
        frontier=("${next[@]}")
    done
    printf '%s\n' "${all[@]}"
}

# Send TERM to the given PIDs, wait up to $1 seconds, then KILL the rest.
terminate() {
    local wait_s="$1" pid alive i
    shift
    (($#)) || return 0
    kill -TERM "$@" 2>/dev/null || true
    for ((i = 0; i < wait_s * 10; i++)); do
        alive=0
        for pid in "$@"; do
            if kill -0 "${pid}" 2>/dev/null; then
                alive=1
            fi
        done
        ((alive)) || return 0
        sleep 0.1
    done
    log "killing processes that ignored SIGTERM: $*"
    kill -KILL "$@" 2>/dev/null || true
}

# ---------------------------------------------------------------- health

ctld_alive() {
    [[ -n "$(pid_from_file "${STATE}/run/slurmctld.pid" slurmctld)" ]]
}

# Clients retry for a long time when no slurmctld listens: ask only when ours
# runs, and bound the wait.
ctld_answers() {
    ctld_alive || return 1
    timeout 5 scontrol ping 2>/dev/null | grep -q 'is UP'
}

# Print "NODE STATE" for each of our nodes (long state names; "*" suffix
# means not responding).
node_states() {
    timeout 5 sinfo -h -N -p batch -o '%N %T' 2>/dev/null | sort -u
}

# The nodes the running cluster's config declares (empty without a config).
configured_nodes() {
    [[ -r "${CONF}" ]] || return 0
    sed -n -E 's/^NodeName=([^ ]+) .*/\1/p' "${CONF}"
}

# The topology.conf the asked-for leaves need (nothing for none).
topology_text() {
    local per leaf first last
    ((LEAVES > 0)) || return 0
    per=$((NODE_COUNT / LEAVES))
    echo "# Generated by tests/slurm/cluster.sh: ${LEAVES} leaf switch(es) under one spine"
    for ((leaf = 1; leaf <= LEAVES; leaf++)); do
        first=$(((leaf - 1) * per + 1))
        last=$((leaf * per))
        if ((first == last)); then
            echo "SwitchName=leaf${leaf} Nodes=node${first}"
        else
            echo "SwitchName=leaf${leaf} Nodes=node[${first}-${last}]"
        fi
    done
    echo "SwitchName=spine Switches=leaf[1-${LEAVES}]"
}

# How many leaf switches the running cluster's config declares (0 without one).
configured_leaves() {
    [[ -r "${TOPOLOGY_CONF}" ]] || { echo 0; return 0; }
    grep -c '^SwitchName=leaf' "${TOPOLOGY_CONF}" || true
}

healthy() {
    local line file comm node state
    # a cluster of another size, or of other switches, is not the one asked for: `up` restarts it
    [[ "$(configured_nodes | tr '\n' ' ')" == "${NODES[*]} " ]] || return 1
    [[ "$(configured_leaves)" == "${LEAVES}" ]] || return 1
    while read -r file comm; do
        [[ -n "$(pid_from_file "${file}" "${comm}")" ]] || return 1
    done < <(daemon_pidfiles)
    ctld_answers || return 1
    for node in "${NODES[@]}"; do
        line="$(node_states | awk -v n="${node}" '$1 == n {print $2}')"
        state="${line:-missing}"
        case "${state}" in
            idle | allocated | mixed | completing) ;;
            *) return 1 ;;
        esac
    done
    return 0
}

# ---------------------------------------------------------------- setup

# The Debian packages, once: tests/tools/debpkgs.sh installs what is missing under one lock, so
# clusters started side by side (make test's e2e workers) never run apt-get at the same moment.
install_packages() {
    if ! bash "${SCRIPT_DIR}/../tools/debpkgs.sh" "${PACKAGES[@]}"; then
        log "installing ${PACKAGES[*]} failed (the lines above say why)"
        exit "${EXIT_FAIL}"
    fi
}

make_dirs() {
    local node
    mkdir -p "${STATE}"/{etc,run,log,lib,munge,spool/ctld}
    chmod 0755 "${STATE}"
    chmod 0755 "${STATE}/munge" # the socket must be reachable; the key is 0400
    for node in "${NODES[@]}"; do
        mkdir -p "${STATE}/spool/${node}" "${STATE}/tmp/${node}" "${STATE}/dev/${node}"
    done
}

make_munge_key() {
    local key="${STATE}/munge/munge.key"
    if [[ ! -s "${key}" ]]; then
        (umask 077 && head -c 1024 /dev/urandom >"${key}")
    fi
    chmod 0400 "${key}"
}

make_fake_gpus() {
    local node i
    for node in "${NODES[@]}"; do
        for ((i = 0; i < GPUS_PER_NODE; i++)); do
            ln -sfn /dev/null "${STATE}/dev/${node}/nvidia${i}"
        done
    done
}

build_plugin() {
    local src="${SCRIPT_DIR}/spank_pyxis_stub.c" so="${STATE}/lib/spank_pyxis_stub.so"
    if [[ ! -s "${so}" || "${src}" -nt "${so}" ]]; then
        gcc -O2 -Wall -shared -fPIC -o "${so}.tmp" "${src}" 2>"${STATE}/log/plugin-build.log" ||
            { log "building the SPANK stub failed:"; cat "${STATE}/log/plugin-build.log" >&2; exit "${EXIT_FAIL}"; }
        mv -f "${so}.tmp" "${so}"
    fi
}

write_configs() {
    local host node i=0 port
    host="$(hostname -s)"
    {
        cat <<EOF
# Generated by tests/slurm/cluster.sh: a throw-away test cluster. Do not edit.
ClusterName=llmbtest
SlurmctldHost=${host}(127.0.0.1)
SlurmctldPort=${PORT_BASE}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=${MUNGE_SOCKET}
CredType=cred/munge
StateSaveLocation=${STATE}/spool/ctld
SlurmdSpoolDir=${STATE}/spool/%n
SlurmctldPidFile=${STATE}/run/slurmctld.pid
SlurmdPidFile=${STATE}/run/slurmd-%n.pid
SlurmctldLogFile=${STATE}/log/slurmctld.log
SlurmdLogFile=${STATE}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
TmpFS=${STATE}/tmp/%n
PlugStackConfig=${STATE}/etc/plugstack.conf
MailProg=/bin/true
# no cgroups
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# no accounting database: sacct does not work on this cluster
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# srun --mpi=pmix works (libpmix-dev provides libpmix.so)
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
# nodes declare more CPUs than the host has
SlurmdParameters=config_overrides
ReturnToService=2
# finished jobs stay visible to squeue/scontrol for an hour
MinJobAge=3600
KillWait=5
InactiveLimit=0
SlurmdTimeout=60
EOF
        for node in "${NODES[@]}"; do
            i=$((i + 1))
            port=$((PORT_BASE + i))
            echo "NodeName=${node} NodeHostname=${host} NodeAddr=127.0.0.1 Port=${port} CPUs=${CPUS_PER_NODE} Boards=1 SocketsPerBoard=1 CoresPerSocket=${CPUS_PER_NODE} ThreadsPerCore=1 RealMemory=16384 Gres=gpu:${GPUS_PER_NODE} State=UNKNOWN"
        done
        if ((LEAVES > 0)); then
            echo "# the switches: ${TOPOLOGY_CONF}"
            echo "TopologyPlugin=topology/tree"
        fi
        local IFS=,
        echo "PartitionName=batch Nodes=${NODES[*]} Default=YES MaxTime=INFINITE State=UP"
    } >"${CONF}.tmp"
    mv -f "${CONF}.tmp" "${CONF}"
    if ((LEAVES > 0)); then
        topology_text >"${TOPOLOGY_CONF}.tmp"
        mv -f "${TOPOLOGY_CONF}.tmp" "${TOPOLOGY_CONF}"
    else
        rm -f "${TOPOLOGY_CONF}"
    fi

    {
        echo "# Generated by tests/slurm/cluster.sh: fake GPUs (symlinks to /dev/null)"
        for node in "${NODES[@]}"; do
            echo "NodeName=${node} Name=gpu File=${STATE}/dev/${node}/nvidia[0-$((GPUS_PER_NODE - 1))]"
        done
    } >"${STATE}/etc/gres.conf"

    echo "required ${STATE}/lib/spank_pyxis_stub.so" >"${STATE}/etc/plugstack.conf"
}

link_system_conf() {
    [[ "${LINK_SYSTEM_CONF}" == 1 ]] || return 0
    # create it where nothing is, or replace a dangling link (a purged state
    # dir); never a real file nor a link to a live config
    if [[ ! -e "${SYSTEM_CONF}" ]]; then
        mkdir -p "$(dirname "${SYSTEM_CONF}")"
        ln -sfn "${CONF}" "${SYSTEM_CONF}"
    fi
}

unlink_system_conf() {
    if [[ -L "${SYSTEM_CONF}" && "$(readlink "${SYSTEM_CONF}")" == "${CONF}" ]]; then
        rm -f "${SYSTEM_CONF}"
    fi
}

# ---------------------------------------------------------------- start/stop

show_logs() {
    local f
    for f in "${STATE}"/log/munged.log "${STATE}"/log/slurmctld.log "${STATE}"/log/slurmd-*.log; do
        [[ -e "${f}" ]] || continue
        echo "----- tail of ${f}" >&2
        tail -n 25 "${f}" >&2
    done
}

fail_start() {
    log "ERROR: $*"
    show_logs
    stop_daemons
    unlink_system_conf
    exit "${EXIT_FAIL}"
}

wait_for() {
    # Bounded by the clock, not by a count of tries: one try may itself take seconds.
    local what="$1" deadline=$((SECONDS + START_TIMEOUT))
    shift
    while ((SECONDS < deadline)); do
        if "$@"; then
            return 0
        fi
        sleep 0.25
    done
    fail_start "timed out after ${START_TIMEOUT}s waiting for ${what}"
}

nodes_idle() {
    local states
    states="$(node_states)"
    local node
    for node in "${NODES[@]}"; do
        grep -qx "${node} idle" <<<"${states}" || return 1
    done
}

start_daemons() {
    local node
    munged --force \
        --socket="${MUNGE_SOCKET}" \
        --key-file="${STATE}/munge/munge.key" \
        --pid-file="${STATE}/run/munged.pid" \
        --log-file="${STATE}/log/munged.log" \
        --seed-file="${STATE}/munge/munged.seed" </dev/null ||
        fail_start "munged did not start"
    wait_for "the munge socket" test -S "${MUNGE_SOCKET}"

    # -c: start with no jobs; jobs of an earlier run (possibly killed by
    # `down`) would otherwise be recovered and requeued.
    slurmctld -c -i </dev/null >>"${STATE}/log/slurmctld.out" 2>&1 ||
        fail_start "slurmctld did not start"
    wait_for "slurmctld to answer" ctld_answers

    for node in "${NODES[@]}"; do
        slurmd -N "${node}" </dev/null >>"${STATE}/log/slurmd-${node}.out" 2>&1 ||
            fail_start "slurmd for ${node} did not start"
    done
    wait_for "nodes ${NODES[*]} to be idle" nodes_idle
}

cancel_jobs() {
    local jobs=() i
    ctld_answers || return 0
    mapfile -t jobs < <(timeout 10 squeue -h -t PD,CF,R,S,CG,RQ,RS,RH,SI,SO,ST -o '%i' 2>/dev/null || true)
    ((${#jobs[@]})) || return 0
    log "cancelling jobs: ${jobs[*]}"
    timeout 10 scancel "${jobs[@]}" 2>/dev/null || true
    for ((i = 0; i < 60; i++)); do
        [[ -z "$(timeout 10 squeue -h -t R,CG,S,SO,ST -o '%i' 2>/dev/null)" ]] && return 0
        sleep 0.25
    done
}

stop_daemons() {
    local slurmds=() ctld=() munge=() steps=()
    mapfile -t slurmds < <(ours_named slurmd)
    terminate 10 "${slurmds[@]}"
    mapfile -t steps < <(our_step_pids)
    terminate 5 "${steps[@]}"
    mapfile -t ctld < <(ours_named slurmctld)
    terminate 10 "${ctld[@]}"
    mapfile -t munge < <(ours_named munged)
    terminate 10 "${munge[@]}"
    rm -f "${STATE}"/run/*.pid
}

# ---------------------------------------------------------------- commands

cmd_up() {
    require_root up
    # a changed SPANK stub source needs a rebuild, and so a restart
    if [[ -d "${STATE}" && ! "${SCRIPT_DIR}/spank_pyxis_stub.c" -nt "${STATE}/lib/spank_pyxis_stub.so" ]] && healthy; then
        link_system_conf
        log "already up (state ${STATE})"
        return 0
    fi
    mkdir -p "${STATE}/log"
    install_packages
    # a half-started or crashed cluster: clear it first
    cancel_jobs
    stop_daemons
    make_dirs
    make_munge_key
    make_fake_gpus
    build_plugin
    write_configs
    start_daemons
    link_system_conf
    log "up: ${NODE_COUNT} node(s) ${NODES[*]} idle$( ((LEAVES == 0)) || echo "; ${LEAVES} leaf switch(es)"); SLURM_CONF=${CONF}"
}

cmd_install() {
    require_root install
    install_packages
}

cmd_down() {
    require_root down
    local purge=0
    if [[ "${1:-}" == --purge ]]; then
        purge=1
    elif [[ -n "${1:-}" ]]; then
        usage
        exit "${EXIT_USAGE}"
    fi
    # daemons are found by their environment, so this works even where the state
    # dir is already gone (deleted with a test's temporary directory)
    cancel_jobs
    stop_daemons
    unlink_system_conf
    if ((purge)); then
        rm -rf -- "${STATE}"
    fi
    log "down"
}

cmd_status() {
    local file comm pid rc=0 configured=()
    # the cluster that runs, whatever size this shell asks for
    mapfile -t configured < <(configured_nodes)
    ((${#configured[@]} == 0)) || NODES=("${configured[@]}")
    LEAVES="$(configured_leaves)"
    echo "state dir: ${STATE}"
    echo "SLURM_CONF=${CONF}"
    while read -r file comm; do
        pid="$(pid_from_file "${file}" "${comm}")"
        printf '%-10s %s (%s)\n' "${comm}" "${pid:-not running}" "$(basename "${file}")"
    done < <(daemon_pidfiles)
    if [[ -e "${CONF}" ]] && ctld_answers; then
        sinfo -N -o '%N %P %T %c %G' || true
    fi
    if ! [[ -d "${STATE}" ]] || ! healthy; then
        echo "status: not running or unhealthy"
        rc="${EXIT_NOT_RUNNING}"
    else
        echo "status: up"
    fi
    return "${rc}"
}

cmd_env() {
    printf 'export SLURM_CONF=%q\n' "${CONF}"
    printf 'export LLMB_SLURM_STATE=%q\n' "${STATE}"
}

main() {
    local cmd="${1:-}"
    (($#)) && shift
    case "${cmd}" in
        install) cmd_install ;;
        up) cmd_up "$@" ;;
        down) cmd_down "$@" ;;
        status) cmd_status "$@" ;;
        env) cmd_env "$@" ;;
        -h | --help | help)
            usage
            ;;
        *)
            usage
            exit "${EXIT_USAGE}"
            ;;
    esac
}

main "$@"
