#!/usr/bin/env bash
# Starts a test cluster for manual use: tests/cluster/up.sh DIR
# Prints the kubeconfig path; stop it with tests/cluster/down.sh DIR.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="$(mkdir -p "${1:?usage: up.sh DIR}" && cd "$1" && pwd)"
PYTHONPATH="$here/.." "$here/../../.venv/bin/python" -P -m cluster.controlplane up "$dir"
