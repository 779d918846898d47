#!/usr/bin/env bash
# make bench-takeover: how long a takeover takes before the new owner serves,
# on a real MinIO server on loopback, for
#   baseline  an almost empty database (the reference of the ratios),
#   sst       a MANIFEST naming TAKEOVER_SST SST files (default 10000),
#   wal       a live WAL of TAKEOVER_SEGMENTS synced segments (default 100000),
#   history   TAKEOVER_ROUNDS past takeovers (default 200).
# Each database is built on a file:// store, copied object by object to
# MinIO, and taken over there after its last owner crashed (hack/takeoverbench
# says how). Prints a table: objects and bytes in the store, time to serve
# (without the lease wait, shown apart), its ratio to the baseline, and the
# store requests the takeover made. Results are noisy on shared machines:
# compare ratios from one run, not times across runs.
#
#   TAKEOVER_SST=1000 TAKEOVER_SEGMENTS=10000 TAKEOVER_ROUNDS=20 make bench-takeover
#   TAKEOVER_SCENARIOS=baseline,wal   run some scenarios only
#   TAKEOVER_JSON=/path/results.jsonl also write one JSON object per scenario
#   TAKEOVER_ARGS='-lease 2s'         more flags (takeoverbench -h)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/benchlib.sh
source "$repo/hack/benchlib.sh"
rocksdb_env
work=$(mktemp -d "${TMPDIR:-/tmp}/shale-takeover.XXXXXX")
minio_pid=
cleanup() {
  [ -n "$minio_pid" ] && kill "$minio_pid" 2>/dev/null && wait "$minio_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/takeoverbench" "$repo/hack/takeoverbench"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export MINIO_ROOT_USER=shalebench MINIO_ROOT_PASSWORD=shalebench-secret MINIO_BROWSER=off
MINIO_UPDATE=off MINIO_CALLHOME_ENABLE=off \
  "$repo/bin/minio" server "$work/minio" --address "127.0.0.1:$port" --console-address "127.0.0.1:0" --quiet >"$work/minio.log" 2>&1 &
minio_pid=$!
# "ready" (not "live"): the object layer is up and S3 requests are served.
for _ in $(seq 300); do curl -fs "http://127.0.0.1:$port/minio/health/ready" >/dev/null && break; sleep 0.1; done
for _ in $(seq 50); do
  curl -fs -X PUT --aws-sigv4 "aws:amz:us-east-1:s3" --user "$MINIO_ROOT_USER:$MINIO_ROOT_PASSWORD" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "http://127.0.0.1:$port/takeover" >/dev/null && break
  sleep 0.2
done
echo "# MinIO on 127.0.0.1:$port, data and work files in $work" >&2

# shellcheck disable=SC2086 # TAKEOVER_ARGS is a list of flags
AWS_ENDPOINT_URL="http://127.0.0.1:$port" AWS_ACCESS_KEY_ID=$MINIO_ROOT_USER AWS_SECRET_ACCESS_KEY=$MINIO_ROOT_PASSWORD AWS_REGION=us-east-1 \
  "$work/takeoverbench" -work "$work" -s3 s3://takeover \
  -scenarios "${TAKEOVER_SCENARIOS:-baseline,sst,wal,history}" \
  -sst "${TAKEOVER_SST:-10000}" -segments "${TAKEOVER_SEGMENTS:-100000}" -rounds "${TAKEOVER_ROUNDS:-200}" \
  ${TAKEOVER_JSON:+-json "$TAKEOVER_JSON"} ${TAKEOVER_ARGS:-}
