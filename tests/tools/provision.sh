#!/usr/bin/env bash
# `make provision`: every Debian package the test tiers use, installed once, before any
# parallel worker starts: the test Slurm cluster's (tests/slurm/cluster.sh install) and
# chromium, the browser the analyzer's HTML report is checked in. make test, test-unit and
# test-e2e run it first; on a machine that has them it only asks dpkg. Without root it installs
# nothing and says which tests skip for it.
#   bash tests/tools/provision.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [[ "$(id -u)" -ne 0 ]]; then
    echo "provision: skipped, not root: the e2e tier (test Slurm clusters) and the browser check" \
        "of the HTML report skip unless their packages are there"
    exit 0
fi
bash "${here}/../slurm/cluster.sh" install
bash "${here}/debpkgs.sh" chromium
