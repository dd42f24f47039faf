#!/usr/bin/env bash
# The README's test command: sets up, runs the static checks, then every test.
set -euo pipefail
cd "$(dirname "$0")/.."
# The repository root holds a folder named operator/: keep Python from putting
# the working directory on sys.path, or it shadows the standard library.
export PYTHONSAFEPATH=1
bash scripts/setup.sh
bash scripts/checks.sh
# End-to-end prerequisites: Debian's prometheus and the cached test-cluster build.
bash tests/cluster/setup.sh
.venv/bin/python -P -m pytest "$@"
