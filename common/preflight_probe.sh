#!/usr/bin/env bash
# The in-job half of `llmb-run preflight` (common/llmb/llmbrun/preflight.py): run by srun once per node,
# inside the container when an image is configured. It only looks; it changes nothing.
# Prints facts, one per line, for the login-node half to judge:
#   LLMB_PROBE <node> <key> <value>
# keys: gpus, gpu_name, driver, gpus_error, visible, cuda_version, cuda_driver_version,
# require_cuda, rdma, uverbs, nccl_net_plugin, nccl_env, imex_channels.
set -uo pipefail

node="${SLURMD_NODENAME:-$(hostname -s)}"

say() {
    printf 'LLMB_PROBE %s %s %s\n' "${node}" "$1" "${2:-}"
}

probe_gpus() {
    local list
    if ! command -v nvidia-smi >/dev/null 2>&1; then
        say gpus_error "nvidia-smi not found in the container"
        return
    fi
    if ! list="$(nvidia-smi -L 2>&1)"; then
        say gpus_error "nvidia-smi -L failed: $(head -n 1 <<<"${list}")"
        return
    fi
    say gpus "$(grep -c '^GPU ' <<<"${list}")"
    say gpu_name "$(grep -m 1 '^GPU ' <<<"${list}" | sed -E 's/^GPU [0-9]+: (.*) \(UUID: .*$/\1/')"
    say driver "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
}

# What the image says it needs (NGC images set these).
probe_image() {
    say visible "${CUDA_VISIBLE_DEVICES:-}"
    say cuda_version "${CUDA_VERSION:-}"
    say cuda_driver_version "${CUDA_DRIVER_VERSION:-}"
    say require_cuda "${NVIDIA_REQUIRE_CUDA:-}"
}

# RDMA devices (InfiniBand, RoCE, EFA all appear under /sys/class/infiniband) and NCCL's
# network plugins (libnccl-net*.so: aws-ofi-nccl, the SHARP plugin, gIB, ...).
probe_network() {
    local dev rdma="" plugins="" dir lib
    local -a dirs=()
    for dev in /sys/class/infiniband/*; do
        [[ -e "${dev}" ]] && rdma+="${dev##*/},"
    done
    say rdma "${rdma%,}"
    say uverbs "$(find /dev/infiniband -maxdepth 1 -name 'uverbs*' 2>/dev/null | wc -l)"
    IFS=: read -r -a dirs <<<"${LD_LIBRARY_PATH:-}"
    dirs+=(/usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib
        /usr/local/lib /opt/hpcx/nccl_rdma_sharp_plugin/lib /opt/amazon/aws-ofi-nccl/lib)
    for dir in "${dirs[@]}"; do
        [[ -n "${dir}" && -d "${dir}" ]] || continue
        for lib in "${dir}"/libnccl-net*.so*; do
            [[ -e "${lib}" && ",${plugins}," != *",${lib},"* ]] && plugins+="${lib},"
        done
    done
    say nccl_net_plugin "${plugins%,}"
    say nccl_env "NCCL_NET=${NCCL_NET:-} NCCL_IB_DISABLE=${NCCL_IB_DISABLE:-} NCCL_NET_PLUGIN=${NCCL_NET_PLUGIN:-}"
}

probe_imex() {
    local n=0 ch
    for ch in /dev/nvidia-caps-imex-channels/channel*; do
        [[ -e "${ch}" ]] && n=$((n + 1))
    done
    say imex_channels "${n}"
}

probe_gpus
probe_image
probe_network
probe_imex
