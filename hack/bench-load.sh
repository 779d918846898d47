#!/usr/bin/env bash
# make bench-load: bulk-load rates on a MinIO server on loopback, one run:
#   in-process  hack/loadbench: the Shale engine loading in this process on
#               the store (the baseline: what an embedded LSM does), parsing
#               and writing in two goroutines, batches of 1 MiB, sync=false,
#               one sync at the end;
#   stream      `shale kv load FILE` into `shale primary` (Load RPC), same
#               batches, durable at the end;
#   sst         `shale kv load --sst FILE` (SST files built locally,
#               ingested through the store).
# Each loads the same file of LOAD_NUM (default 1000000) key<TAB>value pairs
# (20 B keys, 400 B values compressible to half) into a new database.
# Prints rates, their ratio to in-process in the same round, and the
# median ratios. LOAD_ROUNDS (default 1) repeats the three, each round
# starting with another one.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
LOAD_NUM=${LOAD_NUM:-1000000}
LOAD_ROUNDS=${LOAD_ROUNDS:-1}
work=$(mktemp -d "${TMPDIR:-/tmp}/shale-load.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=hack/benchlib.sh
source "$repo/hack/benchlib.sh"
rocksdb_env

go build -o "$work/loadbench" "$repo/hack/loadbench"
go build -o "$work/shale" "$repo/cmd/shale"
"$work/loadbench" --generate "$LOAD_NUM" --input "$work/pairs.tsv"

bench_minio
echo "# MinIO on 127.0.0.1:$port; $LOAD_NUM pairs ($(du -m "$work/pairs.tsv" | cut -f1) MiB), $LOAD_ROUNDS round(s)" >&2

results=$work/results.tsv
: >"$results"
inproc() {
  "$work/loadbench" --db "s3://bench/inproc-$1" --cache-dir "$work/cache-inproc-$1" --input "$work/pairs.tsv" |
    jq -r --arg r "$1" '["in-process", $r, .pairsPerSec, .mbPerSec, .seconds] | @tsv' >>"$results"
}
served() { # mode round
  local mode=$1 round=$2 kv ppid extra=()
  kv=$(freeport)
  "$work/shale" primary --db "s3://bench/$mode-$round" --cache-dir "$work/cache-$mode-$round" \
    --listen "127.0.0.1:$kv" --metrics-listen "" >"$work/primary-$mode-$round.log" 2>&1 &
  ppid=$!
  pids+=("$ppid")
  for _ in $(seq 600); do "$work/shale" kv --addr "127.0.0.1:$kv" status >/dev/null 2>&1 && break; sleep 0.1; done
  [ "$mode" = sst ] && extra=(--sst --tmp-dir "$work/sst-tmp")
  "$work/shale" kv --addr "127.0.0.1:$kv" load "${extra[@]}" --progress-interval 1h -o json "$work/pairs.tsv" |
    jq -r --arg m "$mode" --arg r "$round" '[$m, $r, .pairsPerSec, .mbPerSec, .seconds] | @tsv' >>"$results"
  kill "$ppid"
  wait "$ppid" 2>/dev/null || true
}
# Each round starts with another of the three, so that none always runs
# right after another's background work.
order=(inproc stream sst)
for round in $(seq "$LOAD_ROUNDS"); do
  for i in 0 1 2; do
    case ${order[$(( (i + round - 1) % 3 ))]} in
      inproc) inproc "$round" ;;
      *) served "${order[$(( (i + round - 1) % 3 ))]}" "$round" ;;
    esac
  done
done

printf '\n%-11s %5s %12s %8s %8s %8s\n' load round pairs/s MB/s seconds ratio
sort -t$'\t' -k2,2n -k1,1 "$results" | awk -F'\t' '$1 == "in-process" { base[$2] = $3 } { rows[NR] = $0 }
  END { for (i = 1; i <= NR; i++) { split(rows[i], f, "\t"); printf "%-11s %5s %12d %8.1f %8.1f %8.2f\n", f[1], f[2], f[3], f[4], f[5], f[3] / base[f[2]] } }'
echo "# medians of the ratios:"
for m in stream sst; do
  sort -t$'\t' -k2,2n "$results" | awk -F'\t' -v m="$m" '$1 == "in-process" { base[$2] = $3 } $1 == m { r[$2] = $3 } END { for (k in r) print r[k] / base[k] }' |
    sort -n | awk -v m="$m" '{ v[NR] = $1 } END { printf "#   %s / in-process: %.2f (%d rounds)\n", m, (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, NR }'
done
