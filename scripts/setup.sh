#!/usr/bin/env bash
# Creates .venv and installs tessera with its test dependencies (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
# The repository root holds a folder named operator/: keep Python from putting
# the working directory on sys.path, or it shadows the standard library.
export PYTHONSAFEPATH=1
python3 -m venv .venv
.venv/bin/python -P -m pip install -q --upgrade pip
.venv/bin/python -P -m pip install -q -e '.[dev]'
