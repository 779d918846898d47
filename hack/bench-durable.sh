#!/usr/bin/env bash
# make bench-durable: durable (sync=true) writes of `shale primary` on a
# MinIO server on loopback, under `shale bench fillsync` (20 B keys, 400 B
# values compressible to half, random keys) at each of THREADS (default
# "16 64") concurrent clients for DURATION (default 10s), against, in the
# same run:
#   - BASE (a git ref, default main; BASE= skips it): that revision's shale;
#   - db_bench fillsync with 16 threads on a local directory;
#   - the peer, SlateDB on the same MinIO with its WAL flush interval at
#     PEER_FLUSH (default 2ms), the same writes from the same numbers of
#     concurrent writers: with PEER_BIN, the Rust one (hack/durable-peer,
#     built with `cargo build --release --locked --manifest-path
#     hack/durable-peer/Cargo.toml`, 10-25 minutes the first time; used
#     without PEER_BIN when that build exists), setup "peer-rs"; with
#     PEER_PYTHON set to a Python with the `slatedb` package (pip install
#     slatedb), its Python binding (hack/durable-peer.py), "peer-py".
# Builds alternate ROUNDS times (default 2). Server CPU per op is the
# primary's utime+stime over the benchmark, MinIO's likewise (both from
# /proc/<pid>/stat); requests per op are MinIO's S3 requests over the
# benchmark (its node metrics: every setup's requests, the peer's included);
# writes per group are the primary's durable groups
# (shale_write_group_members_total / shale_write_groups_total, sync="true":
# one segment upload each). Extra flags for this tree's primary go in NEW_FLAGS.
# PIPELINE=D (default 4; PIPELINE= skips it) adds setup "pipe": this tree's
# primary with --wal-pipeline-depth D (docs/rfcs/0013-pipelined-writes.md),
# in the same rounds as "new" (depth 1).
# BATCH=N (default 100; BATCH= skips it) adds the batched load of issue 29:
# `shale bench fillrandom --batch N` (sync=false Writes of N puts) from
# BATCH_THREADS (default 16) clients into base's and this tree's primary, and
# the Rust peer's embedded load of the same WriteBatches, not awaiting
# durability (SlateDB's acknowledgement, as sync=false is Shale's); rows
# "fillbatch", ops count keys.
# Each round also times one conditional PUT (hack/putlatency: 8 KiB objects,
# If-None-Match, one at a time, for DURATION): the floor of a durable write,
# and the denominator of the "p50 ≤ 1.2× one PUT's p50" ratio printed last.
#
#   make bench-durable
#   PEER_BIN=hack/durable-peer/target/release/durable-peer make bench-durable
#   PEER_PYTHON=/tmp/peervenv/bin/python THREADS="16 64" make bench-durable
#   DURABLE_JSON=/tmp/durable.jsonl    # one JSON object per benchmark
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${DURATION:-10s}
THREADS=${THREADS:-16 64}
ROUNDS=${ROUNDS:-2}
BASE=${BASE-main}
PIPELINE=${PIPELINE-4}
PEER_FLUSH=${PEER_FLUSH:-2ms}
BATCH=${BATCH-100}
BATCH_THREADS=${BATCH_THREADS:-16}
built_peer=$repo/hack/durable-peer/target/release/durable-peer
[ -z "${PEER_BIN:-}" ] && [ -x "$built_peer" ] && PEER_BIN=$built_peer
peers=()
[ -n "${PEER_BIN:-}" ] && peers+=(peer-rs)
[ -n "${PEER_PYTHON:-}" ] && peers+=(peer-py)
work=$(mktemp -d "${TMPDIR:-/tmp}/shale-durable.XXXXXX")
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

# cpu PID: the process's user+system time in clock ticks.
cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

go build -o "$work/new/shale" "$repo/cmd/shale"
go build -o "$work/putlatency" "$repo/hack/putlatency"
builds=(new)
if [ -n "$BASE" ]; then
  mkdir -p "$work/base-src"
  git -C "$repo" archive "$BASE" | tar -x -C "$work/base-src"
  base_build "$work/base-src" "$work/base/shale" ./cmd/shale
  builds=(base new)
fi
[ -n "$PIPELINE" ] && builds+=(pipe)

export MINIO_PROMETHEUS_AUTH_TYPE=public # requests per op from its metrics
bench_minio
minio_pid=${pids[-1]}
# requests: MinIO's S3 requests so far.
requests() {
  { curl -fs "http://127.0.0.1:$port/minio/v2/metrics/node" || true; } | awk '/^minio_s3_requests_total[{]/ { n += $2 } END { printf "%d\n", n }'
}
# groups ADDR: the primary's durable groups and the writes they carried.
groups() {
  { curl -fs "http://$1/metrics" || true; } | awk '/^shale_write_groups_total[{]sync="true"[}]/ { g = $2 }
    /^shale_write_group_members_total[{]sync="true"[}]/ { w = $2 } END { printf "%d %d\n", g, w }'
}
echo "# MinIO on 127.0.0.1:$port; DURATION=$DURATION, THREADS=$THREADS, ROUNDS=$ROUNDS, builds: ${builds[*]}${BASE:+ (base: $BASE)}" >&2

results=$work/results.jsonl
: >"$results"
secs=${DURATION%s}
for round in $(seq "$ROUNDS"); do
  for b in "${builds[@]}"; do
    kv=$(freeport); m=$(freeport)
    flags=()
    # shellcheck disable=SC2206
    [ "$b" = new ] && flags=(${NEW_FLAGS:-})
    # shellcheck disable=SC2206
    [ "$b" = pipe ] && flags=(${NEW_FLAGS:-} --wal-pipeline-depth "$PIPELINE")
    bin=$work/$b/shale
    [ "$b" = pipe ] && bin=$work/new/shale
    "$bin" primary --db "s3://bench/$b-$round" --cache-dir "$work/cache-$b-$round" \
      --listen "127.0.0.1:$kv" --metrics-listen "127.0.0.1:$m" "${flags[@]}" >"$work/primary-$b-$round.log" 2>&1 &
    ppid=$!
    pids+=("$ppid")
    for _ in $(seq 600); do "$work/new/shale" kv --addr "127.0.0.1:$kv" status >/dev/null 2>&1 && break; sleep 0.1; done
    runs=()
    for t in $THREADS; do runs+=("fillsync $t 1"); done
    [ -n "$BATCH" ] && [ "$b" != pipe ] && runs+=("fillrandom $BATCH_THREADS $BATCH")
    for run in "${runs[@]}"; do
      read -r bench t batch <<<"$run"
      m0=$(cpu "$minio_pid"); r0=$(requests); read -r g0 w0 < <(groups "127.0.0.1:$m")
      "$work/new/shale" bench --addr "127.0.0.1:$kv" --server-metrics "127.0.0.1:$m" --benchmarks "$bench" --batch "$batch" \
        --duration "$DURATION" --keys 100000 --threads "$t" --key-size 20 --value-size 400 --compression-ratio 0.5 \
        --seed "$round" --progress-interval 1h -o json 2>>"$work/bench.log" >"$work/one.json"
      m1=$(cpu "$minio_pid"); r1=$(requests); read -r g1 w1 < <(groups "127.0.0.1:$m")
      [ "$bench" = fillrandom ] && bench=fillbatch
      jq -c --arg setup "$b" --arg bench "$bench" --argjson round "$round" --argjson t "$t" --argjson mcpu "$(((m1 - m0) * 1000000 / hz))" \
        --argjson reqs "$((r1 - r0))" --argjson groups "$((g1 - g0))" --argjson members "$((w1 - w0))" \
        '.benchmarks[] | {setup: $setup, bench: $bench, round: $round, threads: $t, opsPerSec, p50: .latencyMicros.p50,
          p99: .latencyMicros.p99, clientCpuMicrosPerOp, serverCpuMicrosPerOp,
          minioCpuMicrosPerOp: ($mcpu / .ops), requestsPerOp: ($reqs / .ops),
          writesPerGroup: (if $groups > 0 and $bench == "fillsync" then $members / $groups else null end), errors}' "$work/one.json" >>"$results"
    done
    kill "$ppid"
    wait "$ppid" 2>/dev/null || true
  done
  for peer in "${peers[@]}"; do
    runs=()
    for t in $THREADS; do runs+=("$t 0"); done
    [ -n "$BATCH" ] && [ "$peer" = peer-rs ] && runs+=("$BATCH_THREADS $BATCH")
    for run in "${runs[@]}"; do
      read -r t batch <<<"$run"
      m0=$(cpu "$minio_pid"); r0=$(requests)
      if [ "$peer" = peer-rs ]; then
        "$PEER_BIN" "s3://bench/$peer-$round-$t-$batch" "$t" "$secs" "$PEER_FLUSH" "$batch" >"$work/one.json"
      else
        "$PEER_PYTHON" "$repo/hack/durable-peer.py" "s3://bench/$peer-$round-$t" "$t" "$secs" "$PEER_FLUSH" >"$work/one.json"
      fi
      m1=$(cpu "$minio_pid"); r1=$(requests)
      # MinIO's CPU and requests include the peer's one-second warm-up: upper bounds.
      jq -c --arg setup "$peer" --argjson round "$round" --argjson mcpu "$(((m1 - m0) * 1000000 / hz))" \
        --argjson reqs "$((r1 - r0))" \
        '{setup: $setup, bench: .name, round: $round, threads, opsPerSec, p50, p99, clientCpuMicrosPerOp,
          serverCpuMicrosPerOp: null, minioCpuMicrosPerOp: ($mcpu / .ops), requestsPerOp: ($reqs / .ops),
          writesPerGroup: null, errors: 0}' "$work/one.json" >>"$results"
    done
  done
  # One conditional PUT at a time: the floor of a durable write.
  "$work/putlatency" -db "s3://bench/putlat-$round" -size 8192 -duration "$DURATION" >"$work/one.json"
  jq -c --argjson round "$round" '{setup: "put", bench: "put", round: $round, threads: 1, opsPerSec: .putsPerSec, p50, p99, errors: 0}' \
    "$work/one.json" >>"$results"
  # RocksDB alone: db_bench fillsync, 16 threads, local directory (fsync per
  # write group), the same keys and values.
  db_bench --benchmarks=fillsync --db="$work/db_bench-$round" --threads=16 --duration="$secs" --num=100000000 \
    --key_size=20 --value_size=400 --compression_ratio=0.5 --histogram=1 >"$work/db_bench.txt" 2>&1
  awk -v round="$round" '
    /^fillsync/ { for (i = 1; i <= NF; i++) if ($i == "ops/sec") ops = $(i-1) }
    /^Percentiles:/ { p50 = $3; p99 = $7 }
    END { printf "{\"setup\":\"db_bench\",\"bench\":\"fillsync\",\"round\":%d,\"threads\":16,\"opsPerSec\":%s,\"p50\":%s,\"p99\":%s,\"errors\":0}\n", round, ops, p50, p99 }' \
    "$work/db_bench.txt" >>"$results"
done
[ -n "${DURABLE_JSON:-}" ] && cp "$results" "$DURABLE_JSON"

printf '\n%-8s %-9s %-5s %7s %9s %9s %9s %12s %12s %12s %8s %8s\n' setup bench round threads ops/s "p50 µs" "p99 µs" "client µs/op" "server µs/op" "MinIO µs/op" "req/op" "w/group"
jq -r '[.setup, .bench, .round, .threads, (.opsPerSec|floor), (.p50|floor), (.p99|floor),
    ((.clientCpuMicrosPerOp // 0)|floor), ((.serverCpuMicrosPerOp // 0)|floor), ((.minioCpuMicrosPerOp // 0)|floor),
    (.requestsPerOp // 0), (.writesPerGroup // 0)] | @tsv' "$results" |
  awk -F'\t' '{ printf "%-8s %-9s %-5s %7s %9d %9d %9d %12d %12d %12d %8.4f %8.1f\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12 }'
echo
echo "# means over the rounds; ratios of this tree (new) to each"
jq -rs 'def mean(f): (map(f) | if length > 0 then add/length else null end);
  (map(select(.setup=="db_bench")) | mean(.opsPerSec)) as $dbb |
  (map(select(.setup=="put")) | mean(.p50)) as $put |
  map(select(.setup != "db_bench" and .setup != "put")) | group_by([.bench, .threads])[] | . as $g |
  ($g | map(select(.setup=="new")) | mean(.p50)) as $newp50 |
  ($g | map(select(.setup=="new")) | mean(.opsPerSec)) as $new |
  ($g | map(select(.setup=="base")) | mean(.opsPerSec)) as $base |
  ($g | map(select(.setup=="pipe")) | mean(.opsPerSec)) as $pipe |
  ($g | map(select(.setup=="peer-rs")) | mean(.opsPerSec)) as $rs |
  ($g | map(select(.setup=="peer-py")) | mean(.opsPerSec)) as $py |
  "\($g[0].bench), threads \($g[0].threads): new \($new|floor) ops/s" +
  (if $base then ", base \($base|floor) (new/base \($new/$base*100|round/100))" else "" end) +
  (if $rs then ", SlateDB (Rust) \($rs|floor) (new/peer \($new/$rs*100|round/100))" else "" end) +
  (if $py then ", SlateDB (Python) \($py|floor) (new/peer \($new/$py*100|round/100))" else "" end) +
  (if $put and $g[0].bench == "fillsync" then ", p50 \($newp50/1000*10|round/10) ms = \($newp50/$put*100|round/100)× one PUT'"'"'s \($put/1000*10|round/10) ms" else "" end) +
  (if $dbb and $g[0].bench == "fillsync" then ", db_bench 16 threads \($dbb|floor) (new/db_bench \($new/$dbb*100|round/100))" else "" end) +
  (if $pipe then "; pipe (depth '"${PIPELINE:-1}"') \($pipe|floor) ops/s (pipe/new \($pipe/$new*100|round/100)" +
    (if $rs then ", pipe/peer \($pipe/$rs*100|round/100)" else "" end) + ")" else "" end)' "$results"
