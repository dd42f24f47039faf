#!/usr/bin/env bash
# Stops a cluster started by up.sh, by the PIDs it recorded: tests/cluster/down.sh DIR
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="$(cd "${1:?usage: down.sh DIR}" && pwd)"
PYTHONPATH="$here/.." "$here/../../.venv/bin/python" -P -m cluster.controlplane down "$dir"
