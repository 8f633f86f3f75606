#!/usr/bin/env bats
# tests/tools/debpkgs.sh: the tests' Debian packages installed one installer at a time, and
# tests/tools/provision.sh, which make test runs before its workers. The lock is a private file
# per test (LLMB_APT_LOCK); a package that cannot exist keeps apt-get itself out of every test.

bats_require_minimum_version 1.5.0

REPO="$(cd "${BATS_TEST_DIRNAME}/../.." && pwd)"
SCRIPT="${REPO}/tests/tools/debpkgs.sh"
NO_SUCH=llmb-test-no-such-package

setup() {
    export LLMB_APT_LOCK="${BATS_TEST_TMPDIR}/apt.lock"
}

@test "without packages it says how to call it and exits 2" {
    run --separate-stderr bash "${SCRIPT}"
    [ "${status}" -eq 2 ]
    [[ "${stderr}" == *"usage: bash tests/tools/debpkgs.sh PKG..."* ]]
}

@test "a wait that is not a number of seconds is refused in one line" {
    local wait
    # shellcheck disable=SC2016 # a command substitution given as text, never run
    for wait in soon -1 '$(touch /tmp/llmb-debpkgs-ran)' '1 2' 99999999999999999999 86401; do
        LLMB_APT_WAIT="${wait}" run --separate-stderr bash "${SCRIPT}" bash
        [ "${status}" -eq 2 ]
        [ "${stderr}" = "debpkgs: LLMB_APT_WAIT=${wait} is not a number of seconds; give a whole number from 0 to 86400 (default 900)" ]
    done
    [ ! -e /tmp/llmb-debpkgs-ran ]
}

@test "installed packages cost nothing: no lock is taken, no apt-get runs" {
    run --separate-stderr bash "${SCRIPT}" bash coreutils
    [ "${status}" -eq 0 ]
    [ -z "${stderr}" ]
    [ ! -e "${LLMB_APT_LOCK}" ]
}

@test "a lock held past the wait stops the install with one line naming the lock" {
    [ "$(id -u)" -eq 0 ] || skip "the lock is taken only by root (an install needs root)"
    exec 8>>"${LLMB_APT_LOCK}"
    flock 8
    LLMB_APT_WAIT=1 run --separate-stderr bash "${SCRIPT}" "${NO_SUCH}"
    exec 8>&-
    [ "${status}" -eq 1 ]
    [ "${stderr}" = "debpkgs: waited 1 s for ${LLMB_APT_LOCK} (another install of the tests' packages holds it); let it finish, or set LLMB_APT_WAIT to wait longer" ]
}

@test "a caller that waited finds what the holder installed and installs nothing" {
    [ "$(id -u)" -eq 0 ] || skip "the lock is taken only by root (an install needs root)"
    # the holder 'installs' by the time it lets go: a dpkg-query stand-in that answers
    # installed once the holder's marker exists
    mkdir -p "${BATS_TEST_TMPDIR}/bin"
    cat >"${BATS_TEST_TMPDIR}/bin/dpkg-query" <<SH
#!/usr/bin/env bash
[[ -e "${BATS_TEST_TMPDIR}/installed" ]] && printf 'install ok installed'
SH
    chmod +x "${BATS_TEST_TMPDIR}/bin/dpkg-query"
    exec 8>>"${LLMB_APT_LOCK}"
    flock 8
    PATH="${BATS_TEST_TMPDIR}/bin:${PATH}" LLMB_APT_WAIT=30 bash "${SCRIPT}" "${NO_SUCH}" \
        >"${BATS_TEST_TMPDIR}/out" 2>&1 8>&- &
    pid=$!
    sleep 1
    touch "${BATS_TEST_TMPDIR}/installed"
    exec 8>&-
    wait "${pid}"
    [ ! -s "${BATS_TEST_TMPDIR}/out" ]
}

@test "without root, a missing package is named and nothing is tried" {
    command -v runuser >/dev/null && [ "$(id -u)" -eq 0 ] || skip "needs root to become nobody"
    local dir
    dir="$(mktemp -d /tmp/llmb-debpkgs-nonroot.XXXXXX)"
    cp "${SCRIPT}" "${dir}/debpkgs.sh"
    chmod 0755 "${dir}" "${dir}/debpkgs.sh"
    run --separate-stderr runuser -u nobody -- env LLMB_APT_LOCK="${dir}/apt.lock" \
        bash "${dir}/debpkgs.sh" "${NO_SUCH}"
    rm -rf -- "${dir}"
    [ "${status}" -eq 77 ]
    [ "${stderr}" = "debpkgs: ${NO_SUCH} not installed, and installing needs root" ]
}

@test "the test cluster's install subcommand is a no-op once its packages are there" {
    [ "$(id -u)" -eq 0 ] || skip "the test cluster needs root"
    bash "${REPO}/tests/slurm/cluster.sh" install
    LLMB_SLURM_STATE="${BATS_TEST_TMPDIR}/state" run --separate-stderr \
        bash "${REPO}/tests/slurm/cluster.sh" install
    [ "${status}" -eq 0 ]
    [ -z "${stderr}" ]
    [ ! -e "${BATS_TEST_TMPDIR}/state" ]
}
