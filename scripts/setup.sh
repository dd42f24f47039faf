#!/usr/bin/env bash
# Creates .venv and installs tessera with its test dependencies (idempotent):
# the exact, hashed pins of requirements/dev.lock, then tessera itself, editable.
set -euo pipefail
cd "$(dirname "$0")/.."
# The repository root holds a folder named operator/: keep Python from putting
# the working directory on sys.path, or it shadows the standard library.
export PYTHONSAFEPATH=1
python3 -m venv .venv
.venv/bin/python -P -m pip install -q --upgrade pip
.venv/bin/python -P -m pip install -q --require-hashes -r requirements/dev.lock
.venv/bin/python -P -m pip install -q --no-deps -e .
# A dependency added to pyproject.toml but not locked yet is missing here: say so.
if ! check=$(.venv/bin/python -P -m pip check 2>&1); then
    echo "$check" >&2
    echo "scripts/setup.sh: requirements/dev.lock is older than pyproject.toml: run bash scripts/lock.sh" >&2
    exit 1
fi
