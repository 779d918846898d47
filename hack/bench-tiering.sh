#!/usr/bin/env bash
# make bench-tiering: tiered SST placement on two MinIO servers on loopback,
# the cold one behind a proxy that adds TIERING_LATENCY (default 10ms) to
# every request, standing for HDD-class storage. hack/tieringbench runs a
# primary with --cold-db and a short --cold-after, loads old keys, lets them
# age, loads recent keys, and prints
#   - the fraction of table bytes in the cold tier, once a second;
#   - readrandom on the recent keys (the baseline), on the old keys, and on
#     both at once (recent keys' latency while cold reads run), with ratios
#     to the baseline measured in the same run.
# Results are noisy on shared machines: compare ratios from one run.
#
#   TIERING_OLD=200000 TIERING_RECENT=50000 keys (TIERING_VALUE_SIZE bytes each, 400)
#   TIERING_COLD_AFTER=60s  TIERING_LATENCY=10ms  TIERING_READS=4000  TIERING_THREADS=8
#   TIERING_JSON=/path/results.json  also write the results as JSON
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/benchlib.sh
source "$repo/hack/benchlib.sh"
rocksdb_env
work=$(mktemp -d "${TMPDIR:-/tmp}/shale-tiering.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/tieringbench" "$repo/hack/tieringbench"

export MINIO_ROOT_USER=shalebench MINIO_ROOT_PASSWORD=shalebench-secret MINIO_BROWSER=off
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start_minio() { # NAME BUCKET: prints the port
  local name=$1 bucket=$2 port
  port=$(free_port)
  MINIO_UPDATE=off MINIO_CALLHOME_ENABLE=off \
    "$repo/bin/minio" server "$work/$name" --address "127.0.0.1:$port" --console-address "127.0.0.1:0" --quiet >"$work/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 300); do curl -fs "http://127.0.0.1:$port/minio/health/ready" >/dev/null && break; sleep 0.1; done
  for _ in $(seq 50); do
    curl -fs -X PUT --aws-sigv4 "aws:amz:us-east-1:s3" --user "$MINIO_ROOT_USER:$MINIO_ROOT_PASSWORD" \
      -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "http://127.0.0.1:$port/$bucket" >/dev/null && break
    sleep 0.2
  done
  echo "$port"
}
hot_port=$(start_minio hot hot)
cold_port=$(start_minio cold cold)
echo "# MinIO hot on 127.0.0.1:$hot_port, cold on 127.0.0.1:$cold_port; work files in $work" >&2

AWS_ENDPOINT_URL="http://127.0.0.1:$hot_port" AWS_ACCESS_KEY_ID=$MINIO_ROOT_USER AWS_SECRET_ACCESS_KEY=$MINIO_ROOT_PASSWORD AWS_REGION=us-east-1 \
  "$work/tieringbench" -work "$work" -hot s3://hot/bench -cold s3://cold/bench -cold-endpoint "http://127.0.0.1:$cold_port" \
  -old "${TIERING_OLD:-200000}" -recent "${TIERING_RECENT:-50000}" -value-size "${TIERING_VALUE_SIZE:-400}" \
  -cold-after "${TIERING_COLD_AFTER:-60s}" -latency "${TIERING_LATENCY:-10ms}" \
  -reads "${TIERING_READS:-4000}" -threads "${TIERING_THREADS:-8}" ${TIERING_JSON:+-json "$TIERING_JSON"}
