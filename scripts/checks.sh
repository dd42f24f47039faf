#!/usr/bin/env bash
# Static checks, each timed: ruff (lint), import-linter (layer contracts), mypy
# (types; strict on the planner, see pyproject.toml). Run by scripts/test.sh.
# import-linter and mypy read files, so they check a staged copy of the package
# tree (planner/ -> tessera/planner, ...), which setup.py's mapping produces.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONSAFEPATH=1
bin=.venv/bin
staged=.cache/checks/tree
timed() {
    local name=$1 start
    shift
    start=$(date +%s%N)
    "$@"
    echo "checks: $name took $(( ($(date +%s%N) - start) / 1000000 )) ms"
}
stage() {
    rm -rf "$staged"
    "$bin/python" -P setup.py -q build_py --build-lib "$staged" >/dev/null 2>&1
}
timed ruff "$bin/ruff" check --quiet .
timed stage stage
# from inside the staged tree: lint-imports puts its working directory first on sys.path
timed import-linter env -C "$staged" "$PWD/$bin/lint-imports" --no-cache "$PWD/pyproject.toml"
timed mypy env MYPYPATH="$staged" "$bin/mypy" --cache-dir .cache/checks/mypy -p tessera
