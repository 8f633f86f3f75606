#!/usr/bin/env bash
# Print every shell script of the repository, one per line, for `make lint`: files named *.sh,
# *.bash or *.bats, and any other file whose first line is a sh/bash/bats shebang.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
git ls-files -co --exclude-standard | while IFS= read -r file; do
    [[ -f "$file" ]] || continue
    case "$file" in
        *.sh | *.bash | *.bats) printf '%s\n' "$file" ;;
        *) if head -n 1 -- "$file" | grep -qE '^#!.*(/|env )(ba)?sh( |$)|^#!.*bats'; then
               printf '%s\n' "$file"
           fi ;;
    esac
done | sort
