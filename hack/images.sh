#!/usr/bin/env bash
# Builds Shale's container images locally (nothing is pulled or pushed),
# tagged with the git revision:
#
#   $IMAGE_PREFIX/shale-operator:<rev>  static bin/shale-operator, FROM scratch
#   $IMAGE_PREFIX/shale:<rev>           bin/shale (cgo, RocksDB and its
#                                       compression libs linked statically)
#                                       plus exactly the shared libraries ldd
#                                       finds for it (libstdc++, libgcc_s,
#                                       glibc and the loader), FROM scratch
#   $IMAGE_PREFIX/minio:<rev>           the pinned MinIO that hack/install-deps.sh
#                                       builds (static), FROM scratch
#
# None has a shell or a package manager; all run as uid/gid 65532. Each has
# Debian's CA bundle (package ca-certificates) at /etc/ssl/certs, where Go
# looks for it, so https:// endpoints (AWS S3, a MinIO with TLS) verify.
#
#   hack/images.sh           build (expects `make build` and `make deps` done)
#   hack/images.sh --print   print the three tags
set -euo pipefail
. "$(dirname "$0")/lib.sh"

rev=$(git_rev)
uid=65532
operator_tag=$IMAGE_PREFIX/shale-operator:$rev
shale_tag=$IMAGE_PREFIX/shale:$rev
minio_tag=$IMAGE_PREFIX/minio:$rev

if [ "${1:-}" = --print ]; then
  printf '%s\n' "$shale_tag" "$operator_tag" "$minio_tag"
  exit 0
fi

bin=$repo/bin
minio=$cache/minio/$MINIO_VERSION/minio
for f in "$bin/shale" "$bin/shale-operator"; do
  [ -x "$f" ] || die "$f is missing: run make build"
done
[ -x "$minio" ] || die "$minio is missing: run make deps"

ca_bundle=/etc/ssl/certs/ca-certificates.crt
[ -s "$ca_bundle" ] || die "$ca_bundle is missing: run make deps (it installs ca-certificates)"

# skeleton DIR HOME: the files every image gets: a non-root user, /tmp, the
# CA bundle.
skeleton() {
  local root=$1 home=$2
  mkdir -p "$root/etc/ssl/certs" "$root/tmp" "$root$home"
  cp "$ca_bundle" "$root/etc/ssl/certs/ca-certificates.crt"
  chmod 1777 "$root/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nshale:x:%d:%d:shale:%s:/sbin/nologin\n' "$uid" "$uid" "$home" >"$root/etc/passwd"
  printf 'root:x:0:\nshale:x:%d:\n' "$uid" >"$root/etc/group"
  echo 'hosts: files dns' >"$root/etc/nsswitch.conf"
}

# build_image TAG CTX: Dockerfile in CTX; rootfs/ (root-owned) and home/
# (owned by the user) beside it.
build_image() {
  local tag=$1 ctx=$2
  docker build -q --label "org.opencontainers.image.revision=$rev" -t "$tag" "$ctx" >/dev/null
  rm -rf "$ctx"
  log "built $tag ($(docker image inspect -f '{{.Size}}' "$tag" | numfmt --to=iec))"
}

# --- shale-operator -------------------------------------------------------------
ctx=$(mktemp -d)
skeleton "$ctx/rootfs" /home/shale
mkdir -p "$ctx/home"
cp "$bin/shale-operator" "$ctx/rootfs/shale-operator"
file "$ctx/rootfs/shale-operator" 2>/dev/null | grep -q 'statically linked' ||
  ldd "$ctx/rootfs/shale-operator" 2>&1 | grep -q 'not a dynamic executable' ||
  die "bin/shale-operator is not static (it must be built with CGO_ENABLED=0)"
cat >"$ctx/Dockerfile" <<EOF
FROM scratch
COPY rootfs/ /
COPY --chown=$uid:$uid home/ /home/shale/
ENV HOME=/home/shale
USER $uid:$uid
ENTRYPOINT ["/shale-operator"]
EOF
build_image "$operator_tag" "$ctx"

# --- shale (cgo, RocksDB) --------------------------------------------------------
ctx=$(mktemp -d)
skeleton "$ctx/rootfs" /var/lib/shale
mkdir -p "$ctx/home" "$ctx/rootfs/usr/local/bin"
cp "$bin/shale" "$ctx/rootfs/usr/local/bin/shale"
# Every library the loader resolves, at the path it resolves it to (so the
# loader's default search path finds it without an ld.so.cache), plus the
# loader itself at the interpreter path the binary names.
mapfile -t libs < <(ldd "$bin/shale" | awk '
  /=> not found/ { print "MISSING " $1; next }
  $2 == "=>" && $3 ~ /^\// { print $3; next }
  $1 ~ /^\// { print $1 }')
for lib in "${libs[@]}"; do
  case $lib in MISSING*) die "ldd cannot resolve ${lib#MISSING } for bin/shale" ;; esac
  mkdir -p "$ctx/rootfs$(dirname "$lib")"
  cp -L "$lib" "$ctx/rootfs$lib"
done
interp=$(readelf -l "$bin/shale" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
[ -n "$interp" ] && [ -f "$ctx/rootfs$interp" ] || die "the loader $interp of bin/shale was not collected"
printf '%s\n' "${libs[@]}" >"$ctx/rootfs/etc/shale-libraries.txt"
# RocksDB is linked in (hack/rocksdb.sh): a shared librocksdb here would be
# Debian's 7.8.3, not the version the binary was built for.
if grep -E 'librocksdb|libzstd|liblz4|libsnappy|liburing' "$ctx/rootfs/etc/shale-libraries.txt"; then
  die "bin/shale links RocksDB or its compression libraries dynamically; build it with make build (CGO_LDFLAGS from hack/rocksdb.sh)"
fi
cat >"$ctx/Dockerfile" <<EOF
FROM scratch
COPY rootfs/ /
COPY --chown=$uid:$uid home/ /var/lib/shale/
ENV HOME=/var/lib/shale PATH=/usr/local/bin
WORKDIR /var/lib/shale
USER $uid:$uid
ENTRYPOINT ["/usr/local/bin/shale"]
EOF
build_image "$shale_tag" "$ctx"

# --- minio ------------------------------------------------------------------------
ctx=$(mktemp -d)
skeleton "$ctx/rootfs" /data
mkdir -p "$ctx/home" "$ctx/rootfs/usr/local/bin"
cp "$minio" "$ctx/rootfs/usr/local/bin/minio"
cat >"$ctx/Dockerfile" <<EOF
FROM scratch
COPY rootfs/ /
COPY --chown=$uid:$uid home/ /data/
ENV HOME=/data PATH=/usr/local/bin
LABEL rocks.shale.minio-version=$MINIO_VERSION
USER $uid:$uid
EXPOSE 9000
ENTRYPOINT ["/usr/local/bin/minio"]
CMD ["server", "/data"]
EOF
build_image "$minio_tag" "$ctx"

# --- check they run -----------------------------------------------------------------
out=$(docker run --rm --network=none "$shale_tag" --version) || die "$shale_tag --version failed"
case $out in
  *"RocksDB $ROCKSDB_VERSION"*) log "$shale_tag: $out" ;;
  *) die "$shale_tag --version printed '$out', expected RocksDB $ROCKSDB_VERSION" ;;
esac
out=$(docker run --rm --network=none "$operator_tag" --version) || die "$operator_tag --version failed"
log "$operator_tag: $out"
out=$(docker run --rm --network=none "$minio_tag" --version | head -n1) || die "$minio_tag --version failed"
log "$minio_tag: $out"
log "ok: $shale_tag $operator_tag $minio_tag"
