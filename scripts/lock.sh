#!/usr/bin/env bash
# Regenerates the lock files from pyproject.toml's lower bounds: exact versions
# with hashes, for Linux x86_64 and CPython 3.11 (CI and the image).
#   requirements/runtime.lock  tessera's runtime dependencies (the image, the wheel test)
#   requirements/dev.lock      runtime + offline + numba + dev extras (scripts/setup.sh, CI)
#   requirements/sbom.lock     the image build's SBOM tool (requirements/sbom.in; never in the image's venv)
# Run after adding or raising a dependency in pyproject.toml, and commit both files.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONSAFEPATH=1
UV_VERSION=0.13.8
tools=.cache/lock-tools
if [ ! -x "$tools/bin/uv" ] || [ "$("$tools/bin/uv" --version | cut -d' ' -f2)" != "$UV_VERSION" ]; then
    python3 -m venv "$tools"
    "$tools/bin/python" -m pip install -q "uv==$UV_VERSION"
fi
compile() {
    "$tools/bin/uv" pip compile "${input:-pyproject.toml}" --quiet --generate-hashes --python-version 3.11 \
        --python-platform x86_64-unknown-linux-gnu --no-header --annotation-style line "$@"
}
compile --output-file requirements/runtime.lock
# dev pulls the other extras in through tessera[offline,numba]; they are named here too.
compile --extra dev --extra offline --extra numba --output-file requirements/dev.lock
input=requirements/sbom.in compile --output-file requirements/sbom.lock
echo "wrote requirements/runtime.lock, requirements/dev.lock and requirements/sbom.lock"
