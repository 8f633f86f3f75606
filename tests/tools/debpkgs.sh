#!/usr/bin/env bash
# Install the Debian packages a test tier needs, one installer at a time.
#
#   bash tests/tools/debpkgs.sh PKG...
#
# Packages already installed cost one dpkg-query each and nothing else. The missing ones are
# installed under one lock (LLMB_APT_LOCK, default /var/lock/llmb-apt.lock) that every caller
# of this script takes: make test's workers, test clusters started side by side and .ci/run
# never run apt-get at the same moment (apt itself would refuse the second: "Could not get lock
# /var/lib/apt/lists/lock"). A caller waits at most LLMB_APT_WAIT seconds (default 900) for the
# lock, then stops with one line; apt-get waits as long for a dpkg lock held by a process of
# another kind (an unattended upgrade). What was installed while a caller waited is not
# installed again.
#
# Exit codes: 0 installed (or nothing missing); 1 apt-get failed or the wait ran out (one line
# says which, apt's last lines follow); 2 usage; 77 not root while something is missing.
set -euo pipefail

readonly LOCK="${LLMB_APT_LOCK:-/var/lock/llmb-apt.lock}"
readonly WAIT="${LLMB_APT_WAIT:-900}"

say() { printf 'debpkgs: %s\n' "$*" >&2; }

missing() {
    local pkg
    for pkg in "$@"; do
        if ! dpkg-query -W -f='${Status}' "${pkg}" 2>/dev/null | grep -q 'install ok installed'; then
            printf '%s\n' "${pkg}"
        fi
    done
}

apt() {
    local log="$1"
    shift
    if ! apt-get -o DPkg::Lock::Timeout="${WAIT}" "$@" </dev/null >>"${log}" 2>&1; then
        say "apt-get $1 failed; its last lines:"
        tail -n 20 "${log}" >&2
        return 1
    fi
}

main() {
    local -a todo=()
    local log
    if (($# == 0)); then
        say "usage: bash tests/tools/debpkgs.sh PKG..."
        return 2
    fi
    if ! [[ "${WAIT}" =~ ^[0-9]{1,5}$ ]] || ((10#${WAIT} > 86400)); then
        say "LLMB_APT_WAIT=${WAIT} is not a number of seconds; give a whole number from 0 to" \
            "86400 (default 900)"
        return 2
    fi
    mapfile -t todo < <(missing "$@")
    ((${#todo[@]})) || return 0
    if [[ "$(id -u)" -ne 0 ]]; then
        say "${todo[*]} not installed, and installing needs root"
        return 77
    fi
    exec 9>>"${LOCK}"
    if ! flock -w "${WAIT}" 9; then
        say "waited ${WAIT} s for ${LOCK} (another install of the tests' packages holds it);" \
            "let it finish, or set LLMB_APT_WAIT to wait longer"
        return 1
    fi
    mapfile -t todo < <(missing "${todo[@]}") # a caller before us may have installed them
    ((${#todo[@]})) || return 0
    say "installing ${todo[*]}"
    log="$(mktemp)"
    export DEBIAN_FRONTEND=noninteractive
    local status=0
    apt "${log}" update -qq || status=$?
    if ((status == 0)); then
        apt "${log}" install -y -qq --no-install-recommends "${todo[@]}" || status=$?
    fi
    rm -f -- "${log}"
    return "$((status ? 1 : 0))"
}

main "$@"
