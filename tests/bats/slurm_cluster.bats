#!/usr/bin/env bats
# The throw-away Slurm cluster of tests/slurm/cluster.sh: up, a 2-node x
# 8-task job through the pyxis test double, idempotent up, a 4-node cluster
# (LLMB_SLURM_NODES), two leaf switches (LLMB_SLURM_LEAVES). Needs root;
# skipped otherwise. Brings the cluster down afterwards only if it started it.

CLUSTER="${BATS_TEST_DIRNAME}/../slurm/cluster.sh"

setup_file() {
    export CLUSTER
    if [[ "$(id -u)" -ne 0 ]]; then
        return 0
    fi
    if bash "${CLUSTER}" status >/dev/null 2>&1; then
        export LLMB_SLURM_STARTED_HERE=0
    else
        export LLMB_SLURM_STARTED_HERE=1
        bash "${CLUSTER}" up >&3 2>&1
    fi
}

teardown_file() {
    if [[ "$(id -u)" -eq 0 && "${LLMB_SLURM_STARTED_HERE:-0}" == 1 ]]; then
        bash "${CLUSTER}" down >/dev/null 2>&1 || true
    fi
}

setup() {
    if [[ "$(id -u)" -ne 0 ]]; then
        skip "the test Slurm cluster needs root"
    fi
    eval "$(bash "${CLUSTER}" env)"
}

teardown() {
    # the private cluster of the pid-file test, should that test fail half-way
    if [[ -n "${PRIVATE_SLURM_STATE:-}" ]]; then
        LLMB_SLURM_STATE="${PRIVATE_SLURM_STATE}" LLMB_SLURM_PORT_BASE=17917 \
            LLMB_SLURM_SYSTEM_CONF=0 bash "${CLUSTER}" down --purge >/dev/null 2>&1 || true
    fi
}

@test "cluster is up: node1 and node2 idle with 8 GPUs each" {
    run bash "${CLUSTER}" status
    [ "${status}" -eq 0 ]
    run sinfo -h -N -p batch -o '%N %T %G'
    echo "${output}"
    [ "${status}" -eq 0 ]
    [[ "${output}" =~ node1\ (idle|mixed|allocated)\ gpu:8 ]]
    [[ "${output}" =~ node2\ (idle|mixed|allocated)\ gpu:8 ]]
}

@test "a second up is a quick no-op" {
    local start=${SECONDS}
    run bash "${CLUSTER}" up
    [ "${status}" -eq 0 ]
    [[ "${output}" == *"already up"* ]]
    [ $((SECONDS - start)) -lt 5 ]
}

@test "env prints the SLURM_CONF a client needs" {
    run bash "${CLUSTER}" env
    [ "${status}" -eq 0 ]
    [[ "${output}" == *"export SLURM_CONF="*"/etc/slurm.conf"* ]]
}

@test "2 nodes x 8 tasks with pyxis options: mounts and workdir honoured" {
    local src="${BATS_FILE_TMPDIR}/src" out="${BATS_FILE_TMPDIR}/job.out"
    mkdir -p "${src}"
    echo hi >"${src}/marker.txt"
    run timeout 60 sbatch --wait --parsable --account=testacct --partition=batch \
        --nodes=2 --ntasks-per-node=8 --gpus-per-node=8 --output="${out}" \
        --wrap "srun --mpi=pmix --container-image=nvcr.io#nvidia/nemo:25.04.01 --no-container-mount-home --container-mounts=${src}:/nemo_run --container-workdir=/nemo_run bash -c 'echo \$(pwd) \$(ls /nemo_run) \$SLURM_PROCID \$SLURM_LOCALID \$SLURM_NODEID'"
    echo "${output}"
    [ "${status}" -eq 0 ]
    cat "${out}"
    [ "$(grep -c '^/nemo_run marker.txt ' "${out}")" -eq 16 ]
    # ranks 0..15, each once; local ids 0..7 on nodes 0 and 1
    [ "$(awk '{print $3}' "${out}" | sort -n | uniq | tr '\n' ' ')" == "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 " ]
    [ "$(awk '{print $5}' "${out}" | sort | uniq -c | awk '{print $1}' | tr '\n' ' ')" == "8 8 " ]
}

# The daemons of the cluster whose state dir is $1, found by SLURM_CONF in their
# environment (what cluster.sh itself goes by), as "COMM PID" lines.
daemons_of() {
    local conf="$1/etc/slurm.conf" env_file pid comm
    for env_file in /proc/[0-9]*/environ; do
        pid="${env_file#/proc/}"
        pid="${pid%/environ}"
        comm="$(cat "/proc/${pid}/comm" 2>/dev/null)" || continue
        case "${comm}" in munged | slurmctld | slurmd | slurmstepd) ;; *) continue ;; esac
        if tr '\0' '\n' <"${env_file}" 2>/dev/null | grep -qxF "SLURM_CONF=${conf}"; then
            echo "${comm} ${pid}"
        fi
    done
}

# Point cluster.sh at a private cluster in state dir $1 (own ports, /etc untouched); the
# teardown stops it should the test fail half-way.
private_cluster() {
    PRIVATE_SLURM_STATE="$1"
    export LLMB_SLURM_STATE="$1" LLMB_SLURM_PORT_BASE=17917 LLMB_SLURM_SYSTEM_CONF=0
}

@test "down stops a cluster's daemons even when their pid files are gone" {
    # a private cluster (own state dir and ports, /etc untouched): the shared one keeps running
    local state="${BATS_FILE_TMPDIR}/private-slurm"
    private_cluster "${state}"
    run bash "${CLUSTER}" up
    echo "${output}"
    [ "${status}" -eq 0 ]
    [ "$(daemons_of "${state}" | wc -l)" -eq 4 ]  # munged, slurmctld, 2 x slurmd
    rm -f "${state}"/run/*.pid
    run bash "${CLUSTER}" down --purge
    echo "${output}"
    [ "${status}" -eq 0 ]
    run daemons_of "${state}"
    [ -z "${output}" ]
    [ ! -e "${state}" ]
}

@test "LLMB_SLURM_NODES=4: four nodes take a 4-node job; another size restarts it" {
    # a private cluster again (own state dir and ports), so the shared one keeps its size
    local state="${BATS_FILE_TMPDIR}/private-4" out="${BATS_FILE_TMPDIR}/job4.out"
    private_cluster "${state}"
    LLMB_SLURM_NODES=4 run bash "${CLUSTER}" up
    echo "${output}"
    [ "${status}" -eq 0 ]
    [[ "${output}" == *"up: 4 node(s) node1 node2 node3 node4 idle"* ]]
    export SLURM_CONF="${state}/etc/slurm.conf"
    run sinfo -h -N -p batch -o '%N %T %G'
    echo "${output}"
    [ "$(grep -cE '^node[1-4] idle gpu:8$' <<<"${output}")" -eq 4 ]
    run timeout 60 sbatch --wait --parsable --account=testacct --partition=batch --nodes=4 \
        --ntasks-per-node=2 --output="${out}" --wrap "srun bash -c 'echo \$SLURMD_NODENAME'"
    [ "${status}" -eq 0 ]
    [ "$(sort -u "${out}" | tr '\n' ' ')" == "node1 node2 node3 node4 " ]
    # status describes the cluster that runs, whatever size the caller asks for
    run bash "${CLUSTER}" status
    [ "${status}" -eq 0 ]
    [[ "${output}" == *"slurmd-node4.pid"* ]]
    # asked for 4 again: a no-op; asked for 2: stopped and started with two
    LLMB_SLURM_NODES=4 run bash "${CLUSTER}" up
    [[ "${output}" == *"already up"* ]]
    run bash "${CLUSTER}" up
    [ "${status}" -eq 0 ]
    [[ "${output}" == *"up: 2 node(s) node1 node2 idle"* ]]
    [ "$(daemons_of "${state}" | grep -c '^slurmd ')" -eq 2 ]
    run bash "${CLUSTER}" down --purge
    [ "${status}" -eq 0 ]
    [ -z "$(daemons_of "${state}")" ]
}

@test "a bad LLMB_SLURM_NODES is refused in one line (exit 2)" {
    local bad
    for bad in 0 -1 x 2.5 17 ' 4'; do
        LLMB_SLURM_NODES="${bad}" run bash "${CLUSTER}" status
        echo "${bad}: ${output}"
        [ "${status}" -eq 2 ]
        [ "${#lines[@]}" -eq 1 ]
        [[ "${output}" == "llmb-slurm: LLMB_SLURM_NODES="*" is not a node count; give a whole number from 1 to 16 (default 2)" ]]
    done
}

@test "LLMB_SLURM_LEAVES=2: scontrol show topology puts four nodes under two leaf switches" {
    # a private cluster again (own state dir and ports), so the shared one keeps its switches
    local state="${BATS_FILE_TMPDIR}/private-leaves"
    private_cluster "${state}"
    LLMB_SLURM_NODES=4 LLMB_SLURM_LEAVES=2 run bash "${CLUSTER}" up
    echo "${output}"
    [ "${status}" -eq 0 ]
    [[ "${output}" == *"idle; 2 leaf switch(es); SLURM_CONF="* ]]
    SLURM_CONF="${state}/etc/slurm.conf" run scontrol show topology
    echo "${output}"
    [ "${status}" -eq 0 ]
    [[ "${output}" =~ SwitchName=leaf1\ Level=0\ .*Nodes=node\[1-2\] ]]
    [[ "${output}" =~ SwitchName=leaf2\ Level=0\ .*Nodes=node\[3-4\] ]]
    [[ "${output}" =~ SwitchName=spine\ Level=1\ .*Switches=leaf\[1-2\] ]]
    # the same nodes without switches: stopped and started without a topology
    LLMB_SLURM_NODES=4 run bash "${CLUSTER}" up
    [ "${status}" -eq 0 ]
    [[ "${output}" != *"already up"* && "${output}" != *"leaf switch"* ]]
    [ ! -e "${state}/etc/topology.conf" ]
    run bash "${CLUSTER}" down --purge
    [ "${status}" -eq 0 ]
}

@test "a bad LLMB_SLURM_LEAVES is refused in one line (exit 2)" {
    local bad
    for bad in -1 x 3 5; do
        LLMB_SLURM_NODES=4 LLMB_SLURM_LEAVES="${bad}" run bash "${CLUSTER}" status
        echo "${bad}: ${output}"
        [ "${status}" -eq 2 ]
        [ "${#lines[@]}" -eq 1 ]
        [[ "${output}" == "llmb-slurm: LLMB_SLURM_LEAVES="*" is not a leaf switch count for 4 node(s); give 0 (no topology) or a whole number that divides the node count" ]]
    done
}

@test "a non-root caller is told to skip (exit 77)" {
    command -v runuser >/dev/null || skip "runuser not available"
    local dir
    dir="$(mktemp -d /tmp/llmb-slurm-nonroot.XXXXXX)"
    cp "${CLUSTER}" "${dir}/cluster.sh"
    chmod 0755 "${dir}" "${dir}/cluster.sh"
    run runuser -u nobody -- bash "${dir}/cluster.sh" up
    rm -rf -- "${dir}"
    echo "${output}"
    [ "${status}" -eq 77 ]
    [[ "${output}" == "skipped: the test Slurm cluster needs root"* ]]
}
