#!/usr/bin/env bash
# make bench-compaction: does remote compaction take compaction off the
# primary's core? A sustained fillrandom (DURATION, default 120s; THREADS
# client threads, 400-byte values compressible to half, KEYS keys) against a
# primary on a local MinIO server, with
#   1. local compaction (the baseline),
#   2. remote compaction, one worker,
#   3. remote compaction, two workers.
# The primary and the load-generating client are pinned to core 0 (taskset):
# the service's machine, whose latency the client sees. MinIO, the
# scheduler and the workers share core 1: the storage service and the
# compactors. With local compaction, core 0 also compacts; with remote
# compaction, core 1 does. (A client on core 1 would have its own latency
# inflated by the workers, which is not what this measures.) Prints write throughput, write latency
# (p50/p99/p99.9 per Write request) and compaction throughput (bytes compactions
# wrote, local or remote, per second of the run), with ratios to the local
# baseline, the mean time of a remote job (submission to result) and the
# time RocksDB stalled writes (rocksdb.stall.micros). Results are noisy on
# shared machines: compare the ratios of one run, not numbers across runs.
# KEEP=1 keeps the logs, metrics and bench JSON.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/benchlib.sh
source "$repo/hack/benchlib.sh"
rocksdb_env
DURATION=${DURATION:-180s}
THREADS=${THREADS:-8}
BATCH=${BATCH:-20}
KEYS=${KEYS:-5000000}
shale=$repo/bin/shale
[ -x "$shale" ] || { echo "bench-compaction: $shale is missing: run make build" >&2; exit 1; }
[ "$(nproc)" -ge 2 ] || { echo "bench-compaction: needs 2 cores (the primary on one, the rest on the other)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/shale-bench-compaction.XXXXXX")
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
minio_pid=
cleanup() {
  stop_all
  [ -n "$minio_pid" ] && kill "$minio_pid" 2>/dev/null && wait "$minio_pid" 2>/dev/null
  if [ "${KEEP:-}" = 1 ]; then echo "# kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { # wait_for WHAT CMD...: until CMD succeeds (60 s)
  local what=$1; shift
  for _ in $(seq 600); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "bench-compaction: $what did not come up; logs in $work" >&2; trap - EXIT; exit 1
}

mport=$(port)
export MINIO_ROOT_USER=shalebench MINIO_ROOT_PASSWORD=shalebench-secret MINIO_BROWSER=off
taskset -c 1 "$repo/bin/minio" server "$work/minio" --address "127.0.0.1:$mport" --console-address "127.0.0.1:0" --quiet >"$work/minio.log" 2>&1 &
minio_pid=$!
wait_for MinIO curl -fs "http://127.0.0.1:$mport/minio/health/live"
export AWS_ENDPOINT_URL="http://127.0.0.1:$mport" AWS_ACCESS_KEY_ID=$MINIO_ROOT_USER AWS_SECRET_ACCESS_KEY=$MINIO_ROOT_PASSWORD AWS_REGION=us-east-1
bucket() {
  curl -fs -X PUT --aws-sigv4 "aws:amz:us-east-1:s3" --user "$MINIO_ROOT_USER:$MINIO_ROOT_PASSWORD" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "http://127.0.0.1:$mport/$1" >/dev/null
}
# metric NAME FILE: sum of a series in a Prometheus text dump
metric() { awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $2 } END { printf "%.0f", s }' "$2"; }

echo "# fillrandom for $DURATION, $THREADS threads, batches of $BATCH, $KEYS keys; primary and client on core 0, MinIO and compactor on core 1; logs in $work" >&2
run() { # run NAME WORKERS
  local name=$1 workers=$2
  local dir=$work/$name; mkdir -p "$dir"
  bucket "bench-$name"
  local kv=127.0.0.1:$(port) met=127.0.0.1:$(port) mode=(--compaction local)
  if [ "$workers" -gt 0 ]; then
    local sched=127.0.0.1:$(port)
    taskset -c 1 "$shale" compactor scheduler --listen "$sched" --metrics-listen "" >"$dir/scheduler.log" 2>&1 &
    pids+=($!)
    wait_for scheduler "$shale" compactor stats --scheduler "$sched"
    for i in $(seq "$workers"); do
      taskset -c 1 "$shale" compactor worker --scheduler "$sched" --cache-dir "$dir/worker$i" --id "w$i" --metrics-listen "" >"$dir/worker$i.log" 2>&1 &
      pids+=($!)
    done
    mode=(--compaction remote --compaction-scheduler "$sched" --compaction-queue-timeout 1m)
  fi
  taskset -c 0 "$shale" primary --db "s3://bench-$name/db" --cache-dir "$dir/cache" --listen "$kv" --metrics-listen "$met" "${mode[@]}" >"$dir/primary.log" 2>&1 &
  pids+=($!)
  wait_for primary "$shale" kv --addr "$kv" status
  echo "# $name: running" >&2
  taskset -c 0 "$shale" bench --addr "$kv" --benchmarks fillrandom --duration "$DURATION" --threads "$THREADS" --batch "$BATCH" \
    --keys "$KEYS" --key-size 20 --value-size 400 --seed 1 --server-metrics "$met" -o json >"$dir/bench.json" 2>"$dir/bench.log"
  curl -fs "http://$met/metrics" >"$dir/metrics.txt"
  if [ "$workers" -gt 0 ]; then "$shale" compactor stats --scheduler "$sched" >"$dir/stats.txt"; fi
  stop_all
}
run local 0
run remote1 1
run remote2 2

printf '\n%-22s %9s %6s %9s %9s %9s %6s %11s %6s %8s %9s %9s %9s\n' setup "keys/s" ratio "p50 ms" "p99 ms" "p99.9 ms" "p99 x" "compact MB/s" ratio "remote" fallbacks "job s" "stall s"
compacted() { echo $(( $(metric rocksdb_compact_write_bytes_total "$1/metrics.txt") + $(metric rocksdb_remote_compact_write_bytes_total "$1/metrics.txt") )); }
base_ops=$(jq -r '.benchmarks[0].opsPerSec' "$work/local/bench.json")
base_p99=$(jq -r '.benchmarks[0].latencyMicros.p99' "$work/local/bench.json")
base_c=$(compacted "$work/local")
for row in "local compaction:local" "remote, 1 worker:remote1" "remote, 2 workers:remote2"; do
  name=${row%:*} d=$work/${row##*:}
  cbytes=$(compacted "$d")
  remote=$(metric 'shale_compaction_remote_jobs_total{outcome="completed"}' "$d/metrics.txt")
  fb=$(metric shale_compaction_fallbacks_total "$d/metrics.txt")
  jobs=$(metric shale_compaction_remote_seconds_sum "$d/metrics.txt")
  stall=$(metric rocksdb_stall_micros_total "$d/metrics.txt")
  jq -r '.benchmarks[0] | "\(.opsPerSec) \(.latencyMicros.p50) \(.latencyMicros.p99) \(.latencyMicros["p99.9"]) \(.seconds)"' "$d/bench.json" |
    while read -r ops p50 p99 p999 s; do
      awk -v n="$name" -v ops="$ops" -v p50="$p50" -v p99="$p99" -v p999="$p999" -v s="$s" -v c="$cbytes" \
        -v bo="$base_ops" -v bp="$base_p99" -v bc="$base_c" -v r="$remote" -v f="$fb" -v js="$jobs" -v st="$stall" \
        'BEGIN { cm = c / s / 1e6; bcm = bc / s / 1e6; printf "%-22s %9.0f %6.2f %9.2f %9.2f %9.2f %6.2f %11.1f %6.2f %8d %9d %9.1f %9.1f\n",
          n, ops, ops/bo, p50/1000, p99/1000, p999/1000, p99/bp, cm, (bcm > 0 ? cm/bcm : 0), r, f, (r > 0 ? js/r : 0), st/1e6 }'
    done
done
echo "# target: p99 with remote compaction <= 0.5x local (the p99 x column)" >&2
