# shellcheck shell=bash
# Shared helpers for hack/*.sh. Source it; it sets `repo`, `cache` and the
# pins from versions.env.
#
# Everything slow is cached under ${SHALE_CACHE:-~/.cache/shale}, keyed by
# the versions it was built from, and reused across worktrees and clones.

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=versions.env
. "$repo/hack/versions.env"
cache=${SHALE_CACHE:-$HOME/.cache/shale}
mkdir -p "$cache"

_prog=$(basename "$0" .sh)
log() { printf '%s: %s\n' "$_prog" "$*" >&2; }
die() { printf '%s: error: %s\n' "$_prog" "$*" >&2; exit 1; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else die "need root to run: $* (run as root or install sudo)"; fi
}

# apt_install PKG...: installs the Debian packages that are missing.
apt_install() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing apt packages: ${missing[*]}"
  as_root apt-get update -q || log "apt-get update reported errors; trying the install anyway"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# Long builds share two cores with other work: run them niced.
nicely() { nice -n 10 "$@"; }

# Docker: Debian's docker.io 20.10 daemon. A newer client on PATH would
# complain about the API version, so scripts use Debian's client.
DOCKER=${DOCKER:-/usr/bin/docker}
docker() { "$DOCKER" "$@"; }
# The classic builder uses local images for FROM and never pulls.
export DOCKER_BUILDKIT=0

# Image names. Everything lives only in the local Docker daemon and the kind
# node; nothing is ever pushed or pulled.
IMAGE_PREFIX=${IMAGE_PREFIX:-shale.local}

git_rev() {
  local rev
  rev=$(git -C "$repo" describe --tags --always --dirty 2>/dev/null || echo dev)
  printf '%s' "$rev"
}

# Where the Kubernetes tools live once built (see hack/k8s-binaries.sh).
k8s_bin_dir()    { printf '%s/k8s/%s/bin' "$cache" "$KUBERNETES_VERSION"; }
etcd_bin()       { printf '%s/etcd/%s/etcd' "$cache" "$ETCD_VERSION"; }
coredns_bin()    { printf '%s/coredns/%s/coredns' "$cache" "$COREDNS_VERSION"; }
crictl_bin()     { printf '%s/crictl/%s/crictl' "$cache" "$CRICTL_VERSION"; }
kind_bin()       { printf '%s/kind/%s/kind' "$cache" "$KIND_VERSION"; }
helm_bin()       { printf '%s/helm/%s/helm' "$cache" "$HELM_VERSION"; }
envtest_dir()    { printf '%s/envtest/k8s-%s-etcd-%s' "$cache" "$KUBERNETES_VERSION" "$ETCD_VERSION"; }

# timed LABEL CMD...: runs CMD and logs how long it took.
timed() {
  local label=$1 start end
  shift
  start=$(date +%s)
  "$@"
  end=$(date +%s)
  log "$label took $((end - start))s"
}
