#!/usr/bin/env bash
# Creates .venv and installs tessera with its test dependencies (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -P -m pip install -q --upgrade pip
.venv/bin/python -P -m pip install -q -e '.[dev]'
