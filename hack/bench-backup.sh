#!/usr/bin/env bash
# make bench-backup: what a backup costs (RFC 0011), on real MinIO servers
# on loopback: one with the database (bucket bench) and a second bucket
# (bak), and a second server (bucket bak) for another endpoint. A database
# of BACKUP_BYTES of incompressible values (default 1GiB), compacted and
# checkpointed; then, in the same run: shale's full backup against a plain
# copy of the same objects (server-side within one server; streamed to the
# second server); an incremental backup after 1 % of the keys are
# rewritten; restores to serving from both; and the continuous archive's
# lag under ~1,000 synced writes/s (make bench-archive-lag's test, which
# runs its own MinIO). Prints tables with the ratios (hack/backupbench
# says how each is measured). Results are noisy on shared machines:
# compare ratios from one run, not times across runs.
#
#   BACKUP_BYTES=64MiB make bench-backup     a quick run
#   BACKUP_ARGS='-change 0.05 -v'            more flags (backupbench -h)
#   BACKUP_LAG=0                             leave the archive-lag part out
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/shale-backup.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=hack/benchlib.sh
source "$repo/hack/benchlib.sh"
rocksdb_env
go build -o "$work/backupbench" "$repo/hack/backupbench"
mkbucket() {
  curl -fs -X PUT --aws-sigv4 "aws:amz:us-east-1:s3" --user "$MINIO_ROOT_USER:$MINIO_ROOT_PASSWORD" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "http://127.0.0.1:$1/$2" >/dev/null
}
bench_minio
mkbucket "$port" bak
# The second server: same keys, its own port and data directory.
port2=$(freeport)
MINIO_UPDATE=off MINIO_CALLHOME_ENABLE=off \
  "$repo/bin/minio" server "$work/minio2" --address "127.0.0.1:$port2" --console-address "127.0.0.1:0" --quiet >"$work/minio2.log" 2>&1 &
pids+=($!)
for _ in $(seq 300); do curl -fs "http://127.0.0.1:$port2/minio/health/ready" >/dev/null && break; sleep 0.1; done
for _ in $(seq 50); do mkbucket "$port2" bak && break; sleep 0.2; done
echo "# MinIO on 127.0.0.1:$port (database, bucket bak) and 127.0.0.1:$port2 (bucket bak); work files in $work" >&2
echo "# load: $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) on $(nproc) cores" >&2
# shellcheck disable=SC2086 # BACKUP_ARGS is a list of flags
"$work/backupbench" -work "$work" -bytes "${BACKUP_BYTES:-1GiB}" -other-endpoint "http://127.0.0.1:$port2" ${BACKUP_ARGS:-}
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
if [ "${BACKUP_LAG:-1}" != 0 ]; then
  echo
  echo "archive lag under ~1,000 synced writes/s (30 s, make bench-archive-lag):"
  (cd "$repo" && go test -tags bench -count=1 -run '^TestArchiveLagUnderLoad$' -v ./internal/backup/ 2>&1) |
    grep -E 'synced writes in .* lag p50' | sed 's/^ *archive_lag_bench_test.go:[0-9]*: /  /'
fi
