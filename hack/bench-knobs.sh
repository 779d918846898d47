#!/usr/bin/env bash
# make bench-knobs: the effect of each RocksDB knob of `shale primary`
# (spec.tuning), measured with `shale bench` against a primary on a MinIO
# server on loopback, in one run, against the default settings:
#   default     no knob
#   hash        --data-block-index binary-and-hash        (seed 002)
#   unordered   --unordered-write                          (seed 003)
#   pipelined   --pipelined-write
#   async       --async-io --optimize-multiget-for-io      (seed 000)
# For each: fillrandom (KNOB_NUM puts, 16 threads), then flush and compact
# so that the reads hit SST blocks in the block cache (the seed's "cached
# point lookups"), then readrandom and multireadrandom (32 keys per
# MultiGet). 20 B keys, 400 B values compressible to half. KNOB_ROUNDS
# (default 2) alternates the configurations; the table gives ops/s and
# server CPU per op, and ratios to default within each round.
#
# Then the same knobs in RocksDB alone, as the seeds measured them, with
# db_bench (hack/rocksdb.sh tools) on a local directory, each with and without the knob
# in turn (KNOB_ROUNDS times):
#   hash        fillrandom, compact, readrandom from the block cache (1 thread)
#   unordered   fillrandom, 16 threads (pipelined writes off, as RocksDB's default)
#   pipelined   fillrandom, 16 threads
#   async       fillrandom, compact, multireadrandom of 32 keys (batched
#               MultiGet), 8 MiB block cache
# KNOB_PARTS=served or =dbbench runs one part only.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
KNOB_NUM=${KNOB_NUM:-200000}
KNOB_ROUNDS=${KNOB_ROUNDS:-2}
KNOBS=${KNOBS:-default,hash,unordered,pipelined,async}
work=$(mktemp -d "${TMPDIR:-/tmp}/shale-knobs.XXXXXX")
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
rocksdb_tools
flags() {
  case $1 in
    default) ;;
    hash) echo --data-block-index binary-and-hash ;;
    unordered) echo --unordered-write ;;
    pipelined) echo --pipelined-write ;;
    async) echo --async-io --optimize-multiget-for-io ;;
    *) echo "unknown knob $1" >&2; exit 2 ;;
  esac
}

shale=$work/shale
go build -o "$shale" "$repo/cmd/shale"
bench_minio
echo "# MinIO on 127.0.0.1:$port; KNOB_NUM=$KNOB_NUM, rounds $KNOB_ROUNDS, knobs $KNOBS" >&2

KNOB_PARTS=${KNOB_PARTS:-served,dbbench}
results=$work/results.jsonl
: >"$results"
if [[ $KNOB_PARTS == *served* ]]; then
common=(--threads 16 --key-size 20 --value-size 400 --compression-ratio 0.5 --num "$KNOB_NUM" --keys "$KNOB_NUM" --progress-interval 1h -o json)
for round in $(seq "$KNOB_ROUNDS"); do
  for knob in ${KNOBS//,/ }; do
    kv=$(freeport); m=$(freeport)
    # shellcheck disable=SC2046 # flags() is a list of flags
    "$shale" primary --db "s3://bench/$knob-$round" --cache-dir "$work/cache-$knob-$round" \
      --listen "127.0.0.1:$kv" --metrics-listen "127.0.0.1:$m" $(flags "$knob") >"$work/primary-$knob-$round.log" 2>&1 &
    ppid=$!
    pids+=("$ppid")
    for _ in $(seq 600); do "$shale" kv --addr "127.0.0.1:$kv" status >/dev/null 2>&1 && break; sleep 0.1; done
    run() {
      "$shale" bench --addr "127.0.0.1:$kv" --server-metrics "127.0.0.1:$m" --seed "$round" "${common[@]}" "$@" 2>>"$work/bench.log" |
        jq -c --arg k "$knob" --argjson r "$round" '.benchmarks[] | {knob: $k, round: $r, name, opsPerSec, server: .serverCpuMicrosPerOp, p50: .latencyMicros.p50}' >>"$results"
    }
    run --benchmarks fillrandom
    "$shale" kv --addr "127.0.0.1:$kv" --timeout 10m flush
    "$shale" kv --addr "127.0.0.1:$kv" --timeout 10m compact
    run --benchmarks readrandom
    run --benchmarks multireadrandom --batch 32
    kill "$ppid"
    wait "$ppid" 2>/dev/null || true
  done
done

printf '\n%-10s %-5s %-16s %10s %8s %13s %8s\n' knob round benchmark ops/s ratio "server µs/op" ratio
jq -rs 'map(select(.knob == "default")) as $d | .[] | . as $x |
    ($d[] | select(.round == $x.round and .name == $x.name)) as $b |
    [.knob, .round, .name, .opsPerSec, .opsPerSec / $b.opsPerSec, .server, .server / $b.server] | @tsv' "$results" |
  awk -F'\t' '{ printf "%-10s %-5s %-16s %10d %8.2f %13.1f %8.2f\n", $1, $2, $3, $4, $5, $6, $7 }'
fi

if [[ $KNOB_PARTS == *dbbench* ]]; then
  db=(--key_size=20 --value_size=400 --compression_ratio=0.5 --compression_type=lz4 --bloom_bits=10
    --cache_index_and_filter_blocks=true --format_version=5 --level_compaction_dynamic_level_bytes=true
    --max_background_jobs=2 --seed=1)
  # ops/sec of benchmark $1 in db_bench output $2
  ops() { awk -v b="$1" '$1 == b { for (i = 1; i <= NF; i++) if ($i == "ops/sec") print $(i-1) }' "$2"; }
  dbrun() { # knob on|off -> ops/s of the measured benchmark
    local knob=$1 on=$2 out=$work/db-$1-$2.out
    rm -rf "$work/db"
    case $knob in
      hash) db_bench --benchmarks=fillrandom,compact,readrandom --db="$work/db" --num="$KNOB_NUM" --reads="$KNOB_NUM" \
              --threads=1 --cache_size=$((256 << 20)) --use_data_block_hash_index="$on" "${db[@]}" >"$out" 2>&1
            ops readrandom "$out" ;;
      unordered) db_bench --benchmarks=fillrandom --db="$work/db" --num=$((KNOB_NUM / 16)) --threads=16 \
              --enable_pipelined_write=false --unordered_write="$on" "${db[@]}" >"$out" 2>&1
            ops fillrandom "$out" ;;
      pipelined) db_bench --benchmarks=fillrandom --db="$work/db" --num=$((KNOB_NUM / 16)) --threads=16 \
              --enable_pipelined_write="$on" "${db[@]}" >"$out" 2>&1
            ops fillrandom "$out" ;;
      async) db_bench --benchmarks=fillrandom,compact,multireadrandom --db="$work/db" --num="$KNOB_NUM" \
              --reads=$((KNOB_NUM / 4)) --threads=1 --cache_size=$((8 << 20)) --multiread_batched=true --batch_size=32 \
              --async_io="$on" --optimize_multiget_for_io="$on" "${db[@]}" >"$out" 2>&1
            ops multireadrandom "$out" ;;
    esac
  }
  printf '\n%-10s %-5s %14s %14s %8s   (db_bench, local directory)\n' knob round "off ops/s" "on ops/s" ratio
  for round in $(seq "$KNOB_ROUNDS"); do
    for knob in hash unordered pipelined async; do
      off=$(dbrun "$knob" false); on=$(dbrun "$knob" true)
      awk -v k="$knob" -v r="$round" -v a="$off" -v b="$on" 'BEGIN { printf "%-10s %-5s %14d %14d %8.2f\n", k, r, a, b, b / a }'
    done
  done
fi
