#!/usr/bin/env bash
# make bench-clone: what a clone costs (RFC 0010 steps 16 and 20), on a real
# MinIO server on loopback: a parent loaded with CLONE_BYTES of
# incompressible values (default 1GiB), compacted and checkpointed; then a
# zero-copy clone in the same store against a full copy of the same
# objects (a clone with --clone-copy into a second bucket: server-side
# CopyObject), in the same run. Prints a table: time to a serving clone,
# objects and bytes copied, the clone's directory, and the ratios
# (hack/clonebench says how each is measured). Results are noisy on shared
# machines: compare ratios from one run, not times across runs.
#
#   CLONE_BYTES=64MiB make bench-clone     a quick run
#   CLONE_ARGS='-value-size 1024 -v'       more flags (clonebench -h)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/shale-clone.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=hack/benchlib.sh
source "$repo/hack/benchlib.sh"
rocksdb_env
go build -o "$work/clonebench" "$repo/hack/clonebench"
bench_minio
curl -fs -X PUT --aws-sigv4 "aws:amz:us-east-1:s3" --user "$MINIO_ROOT_USER:$MINIO_ROOT_PASSWORD" \
  -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "http://127.0.0.1:$port/copy" >/dev/null
echo "# MinIO on 127.0.0.1:$port, data and work files in $work" >&2
# shellcheck disable=SC2086 # CLONE_ARGS is a list of flags
"$work/clonebench" -work "$work" -bytes "${CLONE_BYTES:-1GiB}" \
  -parent s3://bench/clone/parent -clone s3://bench/clone/zero-copy -copy s3://copy/clone/full-copy ${CLONE_ARGS:-}
