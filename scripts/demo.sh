#!/usr/bin/env bash
# The README's main command: sets up, then plans the three example systems
# (traffic-analysis, social-media, ar-assistant) together on 8 H100-80GB GPUs.
# Extra arguments go to `tessera plan` (for example: --gpus 120 --output yaml).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONSAFEPATH=1
bash scripts/setup.sh
.venv/bin/tessera plan "$@"
