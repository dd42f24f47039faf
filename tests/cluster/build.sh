#!/usr/bin/env bash
# Builds every test-cluster binary from Go modules (no release downloads, no
# container engine) into a cache folder outside the repository:
#
#   ${TESSERA_CLUSTER_CACHE:-$HOME/.cache/tessera-cluster}/<key>/bin
#
# <key> hashes versions.env, this script and the Go wrapper modules, so a fresh
# clone on the same machine reuses the binaries, and a version bump rebuilds.
# A finished build writes a stamp; with the stamp present the script returns at
# once. Prints the bin folder on stdout (logs go to stderr).
#
# Components: tessera-k8s (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl as argv[0] links), etcd, kwok, kwokctl, helm.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/versions.env"

key_files=("$here/versions.env" "$here/build.sh")
while IFS= read -r f; do key_files+=("$f"); done < <(find "$here/go" -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) | sort)
key="$(cat "${key_files[@]}" | sha256sum | cut -c1-16)"
cache_root="${TESSERA_CLUSTER_CACHE:-$HOME/.cache/tessera-cluster}"
out="$cache_root/k8s-${KUBERNETES_VERSION}-etcd-${ETCD_VERSION}-kwok-${KWOK_VERSION}-helm-${HELM_VERSION}-${key}"
bin="$out/bin"
log() { echo "[cluster-build] $*" >&2; }

# Two test runs on one machine may start a cold build together: the second
# waits for the first and then finds its stamp.
mkdir -p "$cache_root"
exec 9>"$out.lock"
command -v flock >/dev/null 2>&1 && flock 9

if [ -f "$out/stamp" ]; then
  log "cached: $bin"
  echo "$bin"
  exit 0
fi
mkdir -p "$bin"

# The machine is shared: keep the build polite unless the caller says otherwise
# (TESSERA_BUILD_JOBS, TESSERA_BUILD_NICE). -mod=readonly: build exactly the
# committed go.mod/go.sum.
# -trimpath: binaries do not depend on where the module cache lives, so two
# machines with the same toolchain build the same bytes.
export GOFLAGS="${GOFLAGS:-} -p=${TESSERA_BUILD_JOBS:-2} -mod=readonly -buildvcs=false -trimpath"
nice_cmd=(nice -n "${TESSERA_BUILD_NICE:-10}")
timed() { local name="$1"; shift; local t0=$SECONDS; "$@"; log "$name built in $((SECONDS - t0))s"; }

build_kubernetes() {
  local v="$KUBERNETES_VERSION" minor
  minor="$(echo "$v" | cut -d. -f2)"
  local ld="-s -w"
  # Stamp the real version, as hack/lib/version.sh does: kwokctl picks flags
  # from `--version` and Helm charts check kubeVersion.
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$here/go/kubernetes" && "${nice_cmd[@]}" go build -ldflags "$ld" -o "$bin/tessera-k8s" .)
  for c in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    ln -sf tessera-k8s "$bin/$c"
  done
}

build_etcd() {
  local ld="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=${ETCD_VERSION}"
  (cd "$here/go/etcd" && "${nice_cmd[@]}" go build -ldflags "$ld" -o "$bin/etcd" .)
}

build_kwok() {
  # go install pkg@version builds exactly the module's own go.mod/go.sum.
  local ld="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION}"
  ld+=" -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${KUBERNETES_VERSION#v}"
  GOBIN="$bin" "${nice_cmd[@]}" go install -ldflags "$ld" \
    "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}" "sigs.k8s.io/kwok/cmd/kwokctl@${KWOK_VERSION}"
}

build_helm() {
  local minor
  minor="$(echo "$KUBERNETES_VERSION" | cut -d. -f2)"
  local ld="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
  ld+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  ld+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$minor"
  ld+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor"
  GOBIN="$bin" "${nice_cmd[@]}" go install -ldflags "$ld" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
}

components=(${TESSERA_BUILD_ONLY:-kubernetes etcd kwok helm})
for c in "${components[@]}"; do timed "$c" "build_$c"; done
if [ -z "${TESSERA_BUILD_ONLY:-}" ]; then
  date -u +%FT%TZ >"$out/stamp"
fi
log "done: $bin"
echo "$bin"
