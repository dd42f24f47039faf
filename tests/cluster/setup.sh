#!/usr/bin/env bash
# Prepares what the end-to-end tests need on a fresh machine: Debian's
# prometheus (installed only when missing) and the test-cluster binaries
# (built from Go modules, cached; seconds when the cache is warm).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

if ! command -v prometheus >/dev/null 2>&1; then
  echo "[e2e-setup] installing Debian's prometheus" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
command -v go >/dev/null 2>&1 || { echo "[e2e-setup] Go is required to build the test cluster" >&2; exit 1; }
command -v openssl >/dev/null 2>&1 || { echo "[e2e-setup] openssl is required for cluster certificates" >&2; exit 1; }
bash "$here/build.sh" >/dev/null
