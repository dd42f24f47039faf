#!/usr/bin/env bash
# The local try-out: tessera installed with its Helm chart on the local test cluster, planning the three
# example systems, in a few minutes.
#   bash scripts/try.sh [DIR]     # DIR: the cluster's files (default: a new temporary folder)
# A real Kubernetes control plane with KWOK's fake nodes (4 x 8 H100, labelled as GPU feature discovery
# does) and a stand-in for the GPU Operator's mig-manager: tessera plans, partitions the fake GPUs and
# runs its model-server Deployments, whose pods run no containers (tests/cluster/README.md says what
# the test cluster does and does not show). The operator runs on this host with the chart's
# ServiceAccount token, the way docs/install.md explains. Ctrl-C stops everything it started.
# The first run builds the test cluster's Kubernetes binaries from source: about 20-30 minutes and
# 6 GiB on a 2-core machine, once (cached in ~/.cache/tessera-cluster); later runs start in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONSAFEPATH=1
bash scripts/setup.sh >&2
echo "[try] the test cluster's binaries (a cold build takes 20-30 minutes, once)" >&2
bash tests/cluster/setup.sh
TESSERA_CLUSTER_BIN="$(bash tests/cluster/build.sh | tail -1)"
export TESSERA_CLUSTER_BIN
dir="${1:-$(mktemp -d -t tessera-try.XXXXXX)}"
PYTHONPATH="$PWD/tests" exec .venv/bin/python -P -m cluster.tryout "$dir"
