#!/usr/bin/env bash
# make bench-secondary: Shale's secondaries on a real MinIO server on
# loopback (hack/secondarybench says how each figure is measured):
#   lag-notify  visibility lag of synced writes at a steady SECONDARY_RATE
#               (default 50/s) for SECONDARY_DURATION (default 30s), on a
#               secondary that follows the primary's notifications;
#   lag-poll    the same on a secondary that only polls (every 1s);
#   lag-follower the same on a follower (--follower, experimental), which
#               sees only flushed writes (SECONDARY_FLUSH_EVERY flushes the
#               primary during every lag scenario; each ends with a flush);
#   read        readrandom ops/s of one secondary and of the primary on the
#               same SECONDARY_KEYS keys (default 200000), and the ratio.
# Prints two tables. Results are noisy on shared machines: compare figures
# from one run, not across runs.
#
#   SECONDARY_RATE=100 SECONDARY_DURATION=60s make bench-secondary
#   SECONDARY_SCENARIOS=lag-notify          run some scenarios only
#   SECONDARY_JSON=/path/results.json       also write the results as JSON
#   SECONDARY_ARGS='-poll 250ms -threads 8' more flags (secondarybench -h)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/benchlib.sh
source "$repo/hack/benchlib.sh"
rocksdb_env
work=$(mktemp -d "${TMPDIR:-/tmp}/shale-secondary.XXXXXX")
minio_pid=
cleanup() {
  [ -n "$minio_pid" ] && kill "$minio_pid" 2>/dev/null && wait "$minio_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/secondarybench" "$repo/hack/secondarybench"
[ -x "$repo/bin/shale" ] || go build -o "$repo/bin/shale" "$repo/cmd/shale"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export MINIO_ROOT_USER=shalebench MINIO_ROOT_PASSWORD=shalebench-secret MINIO_BROWSER=off
MINIO_UPDATE=off MINIO_CALLHOME_ENABLE=off \
  "$repo/bin/minio" server "$work/minio" --address "127.0.0.1:$port" --console-address "127.0.0.1:0" --quiet >"$work/minio.log" 2>&1 &
minio_pid=$!
# "ready" (not "live"): the object layer is up and S3 requests are served.
for _ in $(seq 300); do curl -fs "http://127.0.0.1:$port/minio/health/ready" >/dev/null && break; sleep 0.1; done
for _ in $(seq 50); do
  curl -fs -X PUT --aws-sigv4 "aws:amz:us-east-1:s3" --user "$MINIO_ROOT_USER:$MINIO_ROOT_PASSWORD" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "http://127.0.0.1:$port/secondary" >/dev/null && break
  sleep 0.2
done
echo "# MinIO on 127.0.0.1:$port, data and work files in $work" >&2

# shellcheck disable=SC2086 # SECONDARY_ARGS is a list of flags
AWS_ENDPOINT_URL="http://127.0.0.1:$port" AWS_ACCESS_KEY_ID=$MINIO_ROOT_USER AWS_SECRET_ACCESS_KEY=$MINIO_ROOT_PASSWORD AWS_REGION=us-east-1 \
  "$work/secondarybench" -work "$work" -s3 s3://secondary -shale "$repo/bin/shale" \
  -scenarios "${SECONDARY_SCENARIOS:-lag-notify,lag-follower,lag-poll,read}" -flush-every "${SECONDARY_FLUSH_EVERY:-0}" \
  -rate "${SECONDARY_RATE:-50}" -lag-duration "${SECONDARY_DURATION:-30s}" -keys "${SECONDARY_KEYS:-200000}" \
  ${SECONDARY_JSON:+-json "$SECONDARY_JSON"} ${SECONDARY_ARGS:-}
