#!/usr/bin/env bash
# Builds tessera's wheel and installs it into a fresh virtual environment, as a
# user (or the image) would: the runtime lock's exact, hashed pins, no extras.
#   bash scripts/wheel_venv.sh DIR   -> DIR/dist/tessera-*.whl, DIR/venv
# Used by tests/packaging/test_wheel.py and bench/package_footprint.py.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONSAFEPATH=1
dir=$(realpath -m "$1")
mkdir -p "$dir"
python3 -m pip wheel -q --no-deps --wheel-dir "$dir/dist" .
python3 -m venv "$dir/venv"
"$dir/venv/bin/python" -m pip install -q --require-hashes --no-deps -r requirements/runtime.lock
"$dir/venv/bin/python" -m pip install -q --no-deps "$dir"/dist/tessera-*.whl
