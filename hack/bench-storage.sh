#!/usr/bin/env bash
# make bench-storage: the paper's db_bench settings (§5: 20-byte keys,
# 400-byte values compressible to half, 8 KiB blocks, a block cache far
# smaller than the data), scaled to this machine: fillrandom then readrandom
# of NUM keys, one thread, on
#   1. db_bench of the same RocksDB build (hack/rocksdb.sh tools) on a local
#      directory — the baseline,
#      and again with the options Shale's engine sets that db_bench's
#      defaults lack (statistics without histograms, a finite table cache,
#      bytes_per_sync),
#   2. Shale's engine without the Shale FileSystem on a local directory (what
#      the Go binding and Shale's options cost; with BASE=<git ref> also
#      that revision's engine, for before/after figures in one run),
#   3. Shale (same engine, the Shale FileSystem) on file://,
#   4. Shale on a local MinIO server (s3://).
# Prints a table with each result's ratio to both db_bench runs. Results are
# noisy on shared machines: compare ratios from one run, not across runs.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
NUM=${NUM:-1000000}
work=$(mktemp -d "${TMPDIR:-/tmp}/shale-bench.XXXXXX")
minio_pid=
cleanup() {
  [ -n "$minio_pid" ] && kill "$minio_pid" 2>/dev/null && wait "$minio_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=hack/benchlib.sh
source "$repo/hack/benchlib.sh"
# shellcheck source=hack/versions.env
source "$repo/hack/versions.env"
rocksdb_env
rocksdb_tools

go build -o "$work/storagebench" "$repo/hack/storagebench"
rows=("RocksDB $ROCKSDB_VERSION db_bench, local dir:local" "db_bench with the engine's options:local-opts" "Shale engine, no FileSystem:engine")
if [ -n "${BASE:-}" ]; then
  # The engine of another revision, for before/after figures in one run.
  mkdir -p "$work/base-src"
  git -C "$repo" archive "$BASE" | tar -x -C "$work/base-src"
  base_build "$work/base-src" "$work/storagebench-base" ./hack/storagebench
  rows+=("Shale engine ($BASE), no FileSystem:engine-base")
fi
rows+=("Shale, file:// store:file" "Shale, MinIO on loopback:s3")

common=(--num="$NUM" --key_size=20 --value_size=400 --cache_size=$((16 << 20)) --block_size=8192 --seed=1)
echo "# NUM=$NUM keys; results in $work" >&2

echo "# 1/4 db_bench on a local directory" >&2
db_bench --benchmarks=fillrandom,readrandom --db="$work/rocksdb" "${common[@]}" \
  --compression_type=lz4 --compression_ratio=0.5 --bloom_bits=10 --cache_index_and_filter_blocks=true \
  --pin_l0_filter_and_index_blocks_in_cache=true --level_compaction_dynamic_level_bytes=true \
  --max_background_jobs=2 --format_version=5 --threads=1 >"$work/local.out" 2>&1

# The same with the options Shale's engine sets that db_bench's defaults
# lack or set otherwise (statistics, tickers only: stats_level 1 is
# kExceptHistogramOrTimers; a finite table cache, bytes_per_sync, no
# pipelined writes: db_bench pipelines by default, RocksDB does not): the engine's
# ratio to this is what the Go binding costs, apart from option choices.
echo "# 1b/4 db_bench with the engine's options" >&2
db_bench --benchmarks=fillrandom,readrandom --db="$work/rocksdb-opts" "${common[@]}" \
  --compression_type=lz4 --compression_ratio=0.5 --bloom_bits=10 --cache_index_and_filter_blocks=true \
  --pin_l0_filter_and_index_blocks_in_cache=true --level_compaction_dynamic_level_bytes=true \
  --max_background_jobs=2 --format_version=5 --threads=1 \
  --statistics=true --stats_level=1 --open_files=65536 --bytes_per_sync=1048576 --enable_pipelined_write=false >"$work/local-opts.out" 2>&1

echo "# 2/4 Shale's engine on a local directory" >&2
"$work/storagebench" --db="local://$work/engine" --cache-dir="$work/unused" "${common[@]}" >"$work/engine.out"

if [ -n "${BASE:-}" ]; then
  echo "# 2b/4 Shale's engine of $BASE on a local directory" >&2
  "$work/storagebench-base" --db="local://$work/engine-base" --cache-dir="$work/unused" "${common[@]}" >"$work/engine-base.out"
fi

echo "# 3/4 Shale on file://" >&2
"$work/storagebench" --db="file://$work/filestore" --cache-dir="$work/cache-file" "${common[@]}" >"$work/file.out"

echo "# 4/4 Shale on MinIO" >&2
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export MINIO_ROOT_USER=shalebench MINIO_ROOT_PASSWORD=shalebench-secret MINIO_BROWSER=off
"$repo/bin/minio" server "$work/minio" --address "127.0.0.1:$port" --console-address "127.0.0.1:0" --quiet >"$work/minio.log" 2>&1 &
minio_pid=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/minio/health/live" >/dev/null && break; sleep 0.1; done
curl -fs -X PUT --aws-sigv4 "aws:amz:us-east-1:s3" --user "$MINIO_ROOT_USER:$MINIO_ROOT_PASSWORD" \
  -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "http://127.0.0.1:$port/bench" >/dev/null
AWS_ENDPOINT_URL="http://127.0.0.1:$port" AWS_ACCESS_KEY_ID=$MINIO_ROOT_USER AWS_SECRET_ACCESS_KEY=$MINIO_ROOT_PASSWORD AWS_REGION=us-east-1 \
  "$work/storagebench" --db="s3://bench/db" --cache-dir="$work/cache-s3" "${common[@]}" >"$work/s3.out"

# ops/sec of a benchmark in a db_bench-format output file
ops() { awk -v b="$1" '$1 == b { for (i = 1; i <= NF; i++) if ($i == "ops/sec") print $(i-1) }' "$2"; }
grep -h '^# store requests' "$work/s3.out" | sed 's/^# store requests/# MinIO requests (op file_type activity):/' >&2 || true
printf '\n%-40s %13s %6s %6s %13s %6s %6s\n' "setup (NUM=$NUM)" "fillrandom/s" "ratio" "ratio2" "readrandom/s" "ratio" "ratio2"
base_f=$(ops fillrandom "$work/local.out"); base_r=$(ops readrandom "$work/local.out")
opts_f=$(ops fillrandom "$work/local-opts.out"); opts_r=$(ops readrandom "$work/local-opts.out")
for row in "${rows[@]}"; do
  name=${row%:*}; f=$(ops fillrandom "$work/${row##*:}.out"); r=$(ops readrandom "$work/${row##*:}.out")
  awk -v n="$name" -v f="$f" -v r="$r" -v bf="$base_f" -v br="$base_r" -v of="$opts_f" -v or="$opts_r" \
    'BEGIN { printf "%-40s %13d %6.2f %6.2f %13d %6.2f %6.2f\n", n, f, f/bf, f/of, r, r/br, r/or }'
done
echo "# ratio: to db_bench; ratio2: to db_bench with the engine's options (statistics, open_files, bytes_per_sync, no pipelined writes)"
