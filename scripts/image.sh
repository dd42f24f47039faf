#!/usr/bin/env bash
# Builds the tessera image without a daemon and checks it: buildah with chroot isolation (its
# default storage), on a base made from Debian's packages by mmdebstrap (bookworm, python3.11), because no
# registry base image is reachable from the build machines. Then it inspects what was built: the
# OCI config (user, entry point, no healthcheck) and the root filesystem (what is writable, that
# only the runtime lock's packages are installed, no package manager, no test suites, the SBOM), and
# runs `tessera --version`, `tessera operator --help` and `tessera plan` in it as UID 65532 on a
# read-only root (chroot + unshare, no runtime needed).
#   bash scripts/image.sh            # build localhost/tessera:dev, check it, print the report
# Needs root and: apt-get install buildah mmdebstrap (installed when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
work=${TESSERA_IMAGE_WORK:-.cache/image}
base=localhost/tessera-base:python3.11-bookworm
image=localhost/tessera:dev
mkdir -p "$work"
for tool in buildah mmdebstrap; do
    command -v "$tool" >/dev/null || { apt-get update -qq && apt-get install -y -qq --no-install-recommends buildah mmdebstrap >/dev/null; }
done
if ! buildah images -q "$base" >/dev/null 2>&1 || [ -z "$(buildah images -q "$base" 2>/dev/null)" ]; then
    echo "[image] making the base from Debian packages (mmdebstrap, a few minutes)" >&2
    mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$work/base.tar"
    ctr=$(buildah from scratch)
    buildah add --quiet "$ctr" "$work/base.tar" / >/dev/null
    buildah config --cmd /bin/sh "$ctr"
    buildah commit --quiet "$ctr" "$base" >/dev/null
    buildah rm "$ctr" >/dev/null
    rm -f "$work/base.tar"
fi
ca=()
if [ -n "${PIP_CERT:-}" ] && [ -f "$PIP_CERT" ]; then  # a TLS-inspecting proxy's CA, for the build only
    ca=(--volume "$PIP_CERT:/run/build-ca.crt:ro" --build-arg PIP_CERT=/run/build-ca.crt)
fi
start=$(date +%s)
revision=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
buildah bud --quiet --isolation chroot --layers=false --squash "${ca[@]}" --build-arg "PYTHON_IMAGE=$base" \
    --build-arg "REVISION=$revision" -t "$image" . >"$work/build.log" 2>&1 \
    || { tail -30 "$work/build.log" >&2; exit 1; }
echo "[image] built $image in $(( $(date +%s) - start )) s" >&2
buildah inspect --type image "$image" > "$work/inspect.json"
ctr=$(buildah from "$image")
trap 'buildah umount "$ctr" >/dev/null 2>&1 || true; buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
root=$(buildah mount "$ctr")
.venv/bin/python -P scripts/image_check.py "$work/inspect.json" "$root" requirements/runtime.lock
