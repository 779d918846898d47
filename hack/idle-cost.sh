#!/usr/bin/env bash
# make bench-idle: what a primary costs in object-store requests (docs/cost.md).
#
#   1. an idle primary (open, no reads, no writes) for IDLE_SECONDS
#      (default 300) at default settings: requests per minute by operation
#      and activity (purpose), from its own shale_objstore_requests_total;
#   2. WRITES synced writes (default 1000) from 16 concurrent clients:
#      requests per 1,000 synced writes.
# Everything runs against a MinIO server on loopback, with `shale primary`
# as a user runs it. SHALE=/path/to/shale measures another build (e.g. an
# older checkout) with the same script. The monthly cost uses S3 Standard
# request prices (us-east-1): PUT, COPY, POST, LIST $0.005 per 1,000;
# GET and all other requests $0.0004 per 1,000; DELETE free.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/benchlib.sh
source "$repo/hack/benchlib.sh"
rocksdb_env
IDLE_SECONDS=${IDLE_SECONDS:-300}
WRITES=${WRITES:-1000}
shale=${SHALE:-$repo/bin/shale}
work=$(mktemp -d "${TMPDIR:-/tmp}/shale-idle.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

port=$(freeport)
export MINIO_ROOT_USER=shalebench MINIO_ROOT_PASSWORD=shalebench-secret MINIO_BROWSER=off
"$repo/bin/minio" server "$work/minio" --address "127.0.0.1:$port" --console-address "127.0.0.1:0" --quiet >"$work/minio.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do curl -fs "http://127.0.0.1:$port/minio/health/live" >/dev/null && break; sleep 0.1; done
curl -fs -X PUT --aws-sigv4 "aws:amz:us-east-1:s3" --user "$MINIO_ROOT_USER:$MINIO_ROOT_PASSWORD" \
  -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "http://127.0.0.1:$port/bench" >/dev/null

export AWS_ENDPOINT_URL="http://127.0.0.1:$port" AWS_ACCESS_KEY_ID=$MINIO_ROOT_USER AWS_SECRET_ACCESS_KEY=$MINIO_ROOT_PASSWORD AWS_REGION=us-east-1
kvport=$(freeport); mport=$(freeport)
"$shale" primary --db s3://bench/db --cache-dir "$work/cache" --listen "127.0.0.1:$kvport" --metrics-listen "127.0.0.1:$mport" >"$work/primary.log" 2>&1 &
pids+=($!)
for _ in $(seq 600); do "$shale" kv --addr "127.0.0.1:$kvport" status >/dev/null 2>&1 && break; sleep 0.1; done
"$shale" kv --addr "127.0.0.1:$kvport" status >/dev/null

# requests: "op activity count" lines summed over file types and results
scrape() {
  curl -fs "http://127.0.0.1:$mport/metrics" | awk '
    /^shale_objstore_requests_total\{/ {
      op = $0; sub(/.*op="/, "", op); sub(/".*/, "", op)
      act = $0; sub(/.*activity="/, "", act); sub(/".*/, "", act)
      n[op " " act] += $NF
    }
    END { for (k in n) print k, n[k] }' | sort
}
# diff of two scrapes: "op activity count" with count = after - before
delta() { join -a2 -e0 -o 0,1.2,2.2 <(awk '{print $1"/"$2, $3}' "$1" | sort) <(awk '{print $1"/"$2, $3}' "$2" | sort) | awk '$3 - $2 > 0 { split($1, k, "/"); print k[1], k[2], $3 - $2 }'; }

# Let the open's own work (and a first idle interval) pass before measuring.
sleep 5
scrape >"$work/idle0"
echo "# idle for ${IDLE_SECONDS}s ($("$shale" --version 2>/dev/null | head -1))" >&2
sleep "$IDLE_SECONDS"
scrape >"$work/idle1"
delta "$work/idle0" "$work/idle1" >"$work/idle"

scrape >"$work/load0"
start=$(date +%s.%N)
seq "$WRITES" | xargs -P 16 -I{} "$shale" kv --addr "127.0.0.1:$kvport" put "key-{}" "value-{}" >/dev/null
end=$(date +%s.%N)
scrape >"$work/load1"
delta "$work/load0" "$work/load1" >"$work/load"

price() { # op -> dollars per request
  case $1 in put|list|copy) echo 0.000005 ;; delete) echo 0 ;; *) echo 0.0000004 ;; esac
}
printf '\n## Idle primary, default settings, %ss\n\n| op | activity | requests | per minute | per month | $ per month |\n|---|---|---:|---:|---:|---:|\n' "$IDLE_SECONDS"
total=0
while read -r op act n; do
  p=$(price "$op")
  line=$(awk -v n="$n" -v s="$IDLE_SECONDS" -v p="$p" 'BEGIN { pm = n*60/s; mo = pm*60*24*30; printf "%.2f %.0f %.4f", pm, mo, mo*p }')
  read -r pm mo usd <<<"$line"
  printf '| %s | %s | %s | %s | %s | %s |\n' "$op" "$act" "$n" "$pm" "$mo" "$usd"
  total=$(awk -v a="$total" -v b="$usd" 'BEGIN { print a + b }')
done <"$work/idle"
awk -v t="$total" 'BEGIN { printf "\nIdle cost: $%.4f a month per database; $%.2f a month for 1,000.\n", t, t*1000 }'

printf '\n## %s synced writes, 16 clients (%.1fs)\n\n| op | activity | requests | per 1,000 writes |\n|---|---|---:|---:|\n' "$WRITES" "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')"
while read -r op act n; do
  printf '| %s | %s | %s | %s |\n' "$op" "$act" "$n" "$(awk -v n="$n" -v w="$WRITES" 'BEGIN { printf "%.1f", n*1000/w }')"
done <"$work/load"
