#!/usr/bin/env bash
# Installs everything Shale needs to build and test on Debian 12 (bookworm).
# Idempotent: a second run only checks. Run as root (or with sudo available).
#
#   apt:  protoc, compilers, cmake, compression libs, liburing, gflags
#   RocksDB: $ROCKSDB_VERSION from Debian's source package, built once per
#          machine as a static library by hack/rocksdb.sh into
#          ${SHALE_CACHE:-~/.cache/shale}/rocksdb-<version> (the first time
#          takes about 15 minutes on 2 cores; then it is instant)
#   Go:   pinned protoc plugins and controller-gen into bin/
#   MinIO: the pinned server built from its Go module, cached under
#          ${SHALE_CACHE:-~/.cache/shale} and linked to bin/minio
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=versions.env
. "$repo/hack/versions.env"
cache=${SHALE_CACHE:-$HOME/.cache/shale}
bin=$repo/bin
mkdir -p "$bin" "$cache"

log() { printf 'install-deps: %s\n' "$*" >&2; }
die() { printf 'install-deps: error: %s\n' "$*" >&2; exit 1; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else die "need root to run: $* (run this script as root or install sudo)"; fi
}

# --- apt packages -----------------------------------------------------------
apt_pkgs=(
  build-essential pkg-config git ca-certificates curl cmake
  libzstd-dev liblz4-dev zlib1g-dev libsnappy-dev libbz2-dev liburing-dev libgflags-dev
  protobuf-compiler libprotobuf-dev
)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing apt packages: ${missing[*]}"
  # Third-party sources may be unreachable offline; Debian's own must work.
  as_root apt-get update -q || log "apt-get update reported errors; trying the install anyway"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# --- RocksDB (static, cached; Debian's librocksdb-dev is not used) -----------
"$repo/hack/rocksdb.sh"
have_rocksdb=$(sed -n '1s/^rocksdb //p' "$("$repo/hack/rocksdb.sh" --print)/.stamp")

# --- Go ---------------------------------------------------------------------
command -v go >/dev/null 2>&1 || die "Go is not installed; install Go 1.26 or newer (https://go.dev/doc/install)"
goversion=$(go env GOVERSION)
case "$goversion" in
  go1.2[6-9]*|go1.[3-9][0-9]*) ;;
  *) die "Go $goversion is too old; Shale needs Go 1.26 or newer" ;;
esac

# go install is cached; re-running it for an installed pin takes a second.
install_tool() { # name module@version
  local name=$1 modver=$2 stamp="$bin/.$1.version"
  if [ -x "$bin/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$modver" ]; then return; fi
  log "go install $modver"
  GOBIN="$bin" GOFLAGS=-mod=mod go install "$modver"
  echo "$modver" >"$stamp"
}
install_tool protoc-gen-go "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
install_tool protoc-gen-go-grpc "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION"
install_tool controller-gen "sigs.k8s.io/controller-tools/cmd/controller-gen@$CONTROLLER_TOOLS_VERSION"

# --- MinIO (built once per pin; ~4 min on 2 cores the first time) ------------
minio_cached="$cache/minio/$MINIO_VERSION/minio"
if [ ! -x "$minio_cached" ]; then
  log "building MinIO $MINIO_VERSION from its Go module (first time only, a few minutes)"
  tmp=$(mktemp -d "$cache/minio-build.XXXXXX")
  GOBIN="$tmp" CGO_ENABLED=0 go install "github.com/minio/minio@$MINIO_VERSION"
  mkdir -p "$(dirname "$minio_cached")"
  mv "$tmp/minio" "$minio_cached"
  rmdir "$tmp"
fi
if ! cmp -s "$minio_cached" "$bin/minio" 2>/dev/null; then
  ln -f "$minio_cached" "$bin/minio" 2>/dev/null || cp "$minio_cached" "$bin/minio"
fi

log "ok: rocksdb $have_rocksdb, $goversion, protoc $(protoc --version | awk '{print $2}'), minio $MINIO_VERSION"
