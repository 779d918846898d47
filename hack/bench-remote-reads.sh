#!/usr/bin/env bash
# make bench-remote-reads: point reads, MultiGets and scans of `shale
# primary` when its tables stay in the object store (a MinIO on loopback)
# and its caches hold under 5% of the data.
#
# Loads NUM pairs (default 1,000,000; 20 B keys, 400 B values compressible
# to half) with `shale bench fillseq` into one database, flushes and
# compacts it, then restarts a primary on it (a new epoch each time) per
# setup, ROUNDS times (default 1), alternating:
#
#   base    BASE's build (default main): --cache-size 1 (no table is
#           fetched whole), --block-cache-size CACHE (default 8MiB)
#   new     this tree: --cache-size 1, RocksDB's block cache and the range
#           cache CACHE/2 each (same memory as base)
#   readahead  this tree as `new`, with --scan-readahead READAHEAD
#           (default 256KiB, about what a scan of 1,000 pairs reads): the
#           synchronous path with the async setup's scan readahead, to
#           tell the two apart
#   async   this tree as `new`, with --async-io --optimize-multiget-for-io
#           --scan-readahead READAHEAD: RocksDB's asynchronous prefetch and
#           seeks (ReadAsync/Poll of the Shale FileSystem: ranged GETs in
#           goroutines), a MultiGet's parts read at once (the engine splits
#           it), and scans reading ahead in large steps, against the
#           synchronous path of `new`, alternating with it
#   cached  this tree with its default caches (8 GiB of tables, 256 MiB
#           block cache), after a warm-up that fetches every table: the
#           data-in-the-cache reference
#
# Each runs, for READ_SECONDS (default 20) each: readrandom (16 threads),
# multireadrandom of 32 keys per MultiGet (16 threads), readrandom and
# multireadrandom with 1 thread (what a single caller waits: 32 Gets one
# after another vs one MultiGet of 32), and scan of 1,000 pairs (4 threads
# and 1 thread).
# Ops count keys (a MultiGet of 32 is 32) or scans. Each row also gives
# the GETs the primary made per op (its range cache's) and MinIO's CPU per
# GET (its utime+stime over the benchmark): on one machine at 0 ms of
# added latency these bound every setup (docs/performance.md, "Issue 29,
# second pass").
#
#   make bench-remote-reads                   # NUM=1000000 ROUNDS=1
#   NUM=200000 READ_SECONDS=10 make bench-remote-reads
#   REMOTE_JSON=/tmp/remote.jsonl             # one JSON object per benchmark
#   SETUPS="new async"                        # a subset, in this order
#   LATENCY="0 10ms"                          # each setup at each latency
#
# LATENCY (default 0) lists first-byte latencies to read at: for each one
# that is not 0, the primaries read through hack/latencyproxy, an HTTP
# proxy that holds every request to MinIO back by that long (a remote S3
# answers in 5-30 ms, a MinIO on loopback in ~0.3 ms). The load is always
# direct. The output says which rows went through the proxy.
#
# With PEER_PYTHON set to a Python with the `slatedb` package (pip install
# slatedb), the embedded peer also loads the same NUM pairs into the same
# MinIO (hack/remote-reads-peer.py) and reads them at random, 16 at a time,
# with a block cache of CACHE bytes: setup "peer", readrandom only.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
NUM=${NUM:-1000000}
ROUNDS=${ROUNDS:-1}
SECONDS_EACH=${READ_SECONDS:-20}
BASE=${BASE:-main}
CACHE=${CACHE:-8MiB}
SETUPS=${SETUPS:-base new readahead async cached}
READAHEAD=${READAHEAD:-256KiB}
LATENCY=${LATENCY:-0}
work=$(mktemp -d "${TMPDIR:-/tmp}/shale-remote.XXXXXX")
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
half=$(python3 -c "
import re,sys; m=re.fullmatch(r'(\d+)(KiB|MiB|GiB)?','$CACHE'); n=int(m[1])*{None:1,'KiB':1<<10,'MiB':1<<20,'GiB':1<<30}[m[2]]; print(n//2)")

go build -o "$work/new/shale" "$repo/cmd/shale"
if [[ " $SETUPS " == *" base "* ]]; then
  mkdir -p "$work/base-src"
  git -C "$repo" archive "$BASE" | tar -x -C "$work/base-src"
  base_build "$work/base-src" "$work/base/shale" ./cmd/shale
fi
shale=$work/new/shale
if [ "$LATENCY" != 0 ]; then
  go build -o "$work/latencyproxy" "$repo/hack/latencyproxy"
fi

bench_minio
minio_pid=${pids[-1]}
# cputicks PID: the process's utime+stime in clock ticks.
cputicks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
db=s3://bench/db
echo "# MinIO on 127.0.0.1:$port; NUM=$NUM ROUNDS=$ROUNDS READ_SECONDS=$SECONDS_EACH CACHE=$CACHE BASE=$BASE SETUPS='$SETUPS' LATENCY='$LATENCY' READAHEAD=$READAHEAD; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
direct=$AWS_ENDPOINT_URL
declare -A endpoint=([0]=$direct)
for lat in $LATENCY; do
  [ "$lat" = 0 ] && continue
  coproc_out=$work/proxy-$lat.addr
  "$work/latencyproxy" -target "$direct" -latency "$lat" >"$coproc_out" 2>"$work/proxy-$lat.log" &
  pids+=($!)
  for _ in $(seq 100); do [ -s "$coproc_out" ] && break; sleep 0.1; done
  endpoint[$lat]=$(head -1 "$coproc_out")
  echo "# LATENCY=$lat: primaries read through ${endpoint[$lat]}, a proxy that holds each request to MinIO back by $lat" >&2
done

# start BUILD NAME FLAGS...: a primary on $db in the background; sets kv, m, ppid.
start() {
  local b=$1 name=$2
  shift 2
  kv=$(freeport); m=$(freeport)
  AWS_ENDPOINT_URL=${endpoint[${lat:-0}]} "$work/$b/shale" primary --db "$db" --cache-dir "$work/cache-$name" \
    --listen "127.0.0.1:$kv" --metrics-listen "127.0.0.1:$m" "$@" >"$work/primary-$name.log" 2>&1 &
  ppid=$!
  pids+=("$ppid")
  for _ in $(seq 1200); do "$shale" kv --addr "127.0.0.1:$kv" status >/dev/null 2>&1 && return; sleep 0.1; done
  echo "primary $name did not start:" >&2; tail -20 "$work/primary-$name.log" >&2; exit 1
}
stop() { kill "$ppid"; wait "$ppid" 2>/dev/null || true; }
common=(--key-size 20 --value-size 400 --compression-ratio 0.5 --keys "$NUM" --progress-interval 1h -o json)

lat=0
start new load
"$shale" bench --addr "127.0.0.1:$kv" --benchmarks fillseq --num "$NUM" --batch 100 --threads 4 "${common[@]}" >"$work/load.json"
"$shale" kv --addr "127.0.0.1:$kv" flush
"$shale" kv --addr "127.0.0.1:$kv" compact
echo "# loaded: $(jq -r '.benchmarks[0] | "\(.ops) pairs at \(.opsPerSec|floor)/s"' "$work/load.json"); $(curl -fs "http://127.0.0.1:$m/metrics" | grep -E '^rocksdb_live_sst_files_size_bytes|^shale_rocksdb_live_sst' | head -2 | tr '\n' ' ')" >&2
stop

results=$work/results.jsonl
: >"$results"
run() { # setup round benchmark threads extra...
  local setup=$1 round=$2 bench=$3 threads=$4 t0 g0
  shift 4
  # MinIO's CPU and the primary's GETs over the benchmark: what one GET
  # costs the store (the bound at 0 ms of added latency on one machine).
  t0=$(cputicks "$minio_pid")
  g0=$(range_gets)
  "$shale" bench --addr "127.0.0.1:$kv" --server-metrics "127.0.0.1:$m" --benchmarks "$bench" --threads "$threads" \
    --duration "${SECONDS_EACH}s" --seed "$round" "${common[@]}" "$@" 2>>"$work/bench.log" |
    jq -c --arg setup "$setup" --arg latency "$lat" --argjson round "$round" --argjson threads "$threads" --arg load "$(cut -d' ' -f1 /proc/loadavg)" \
      '.benchmarks[] | {setup: $setup, latency: $latency, round: $round, name, threads: $threads, opsPerSec, p50: .latencyMicros.p50,
        p99: .latencyMicros.p99, serverCpuMicrosPerOp, errors, load: $load}' >"$work/run.json"
  local ticks gets
  ticks=$(($(cputicks "$minio_pid") - t0))
  gets=$(($(range_gets) - g0))
  jq -c --argjson ticks "$ticks" --argjson hz "$hz" --argjson gets "$gets" \
    '. + {storeGets: $gets, storeGetsPerOp: ($gets / ([.opsPerSec * '"$SECONDS_EACH"', 1] | max)),
      storeCpuMicrosPerGet: (if $gets > 0 then $ticks / $hz * 1e6 / $gets else null end)}' "$work/run.json" >>"$results"
}
# range_gets: the GETs the primary's range cache made so far (0 when it has none).
range_gets() {
  curl -fs "http://127.0.0.1:$m/metrics" | awk '/^shale_range_cache_gets_total/ {n = $2} END {printf "%d\n", n + 0}'
}
for round in $(seq "$ROUNDS"); do
  for lat in $LATENCY; do
  for setup in $SETUPS; do
    case $setup in
      base) start base "base-$round-$lat" --cache-size 1 --block-cache-size "$CACHE" ;;
      new) start new "new-$round-$lat" --cache-size 1 --block-cache-size "$half" --range-cache-size "$half" ;;
      readahead)
        start new "readahead-$round-$lat" --cache-size 1 --block-cache-size "$half" --range-cache-size "$half" \
          --scan-readahead "$READAHEAD"
        ;;
      async)
        start new "async-$round-$lat" --cache-size 1 --block-cache-size "$half" --range-cache-size "$half" \
          --async-io --optimize-multiget-for-io --scan-readahead "$READAHEAD"
        ;;
      cached)
        start new "cached-$round-$lat"
        # Warm up: open every table (each fetched whole into the cache).
        "$shale" bench --addr "127.0.0.1:$kv" --benchmarks scan --scan-length 1000 --threads 4 --duration 20s "${common[@]}" >/dev/null 2>>"$work/bench.log"
        ;;
    esac
    run "$setup" "$round" readrandom 16
    run "$setup" "$round" multireadrandom 16 --batch 32
    run "$setup" "$round" readrandom 1
    run "$setup" "$round" multireadrandom 1 --batch 32
    run "$setup" "$round" scan 4 --scan-length 1000
    run "$setup" "$round" scan 1 --scan-length 1000
    if [ "$setup" = new ] || [ "$setup" = readahead ] || [ "$setup" = async ]; then
      curl -fs "http://127.0.0.1:$m/metrics" | grep -E '^shale_range_cache' >&2 || true
    fi
    stop
  done
  done
done
lat=0
if [ -n "${PEER_PYTHON:-}" ]; then
  peer=$repo/hack/remote-reads-peer.py
  "$PEER_PYTHON" "$peer" load s3://bench/peer "$NUM" >"$work/peer-load.json"
  echo "# peer loaded: $(cat "$work/peer-load.json")" >&2
  for round in $(seq "$ROUNDS"); do
    "$PEER_PYTHON" "$peer" readrandom s3://bench/peer "$NUM" "$((half * 2))" "$SECONDS_EACH" 16 |
      jq -c --argjson round "$round" --arg load "$(cut -d' ' -f1 /proc/loadavg)" \
        '{setup: "peer", latency: "0", round: $round, name, threads, opsPerSec, p50, p99, serverCpuMicrosPerOp: null, errors: 0, load: $load}' >>"$results"
  done
fi
[ -n "${REMOTE_JSON:-}" ] && cp "$results" "$REMOTE_JSON"

printf '\n%-7s %-7s %-5s %-16s %7s %12s %9s %9s %12s %8s %13s %5s\n' setup latency round benchmark threads "keys/s" "p50 µs" "p99 µs" "server µs/op" "GETs/op" "store µs/GET" load
jq -r '[.setup, .latency, .round, .name, .threads, (.opsPerSec|floor), (.p50|floor), (.p99|floor), ((.serverCpuMicrosPerOp // 0)*10|round/10),
    ((.storeGetsPerOp // 0)*100|round/100), ((.storeCpuMicrosPerGet // 0)|floor), .load] | @tsv' "$results" |
  awk -F'\t' '{ printf "%-7s %-7s %-5s %-16s %7d %12d %9d %9d %12.1f %8.2f %13d %5s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12 }'
echo
echo "# means over the rounds; ratios: new/base, new/cached, async/new (per round after it), readahead/new, async/readahead, multireadrandom/readrandom (same setup, latency and threads)"
echo "# latency: added to each request to MinIO by hack/latencyproxy (0: direct)"
jq -rs '
  def mean(s): [s] | if length == 0 then 0 else add / length end;
  (group_by([.latency, .name, .threads])[] | . as $g | [$g[0].latency, $g[0].name, $g[0].threads,
    mean($g[] | select(.setup=="base") | .opsPerSec), mean($g[] | select(.setup=="new") | .opsPerSec),
    mean($g[] | select(.setup=="cached") | .opsPerSec), mean($g[] | select(.setup=="peer") | .opsPerSec),
    mean($g[] | select(.setup=="async") | .opsPerSec), mean($g[] | select(.setup=="readahead") | .opsPerSec),
    ([$g[] | select(.setup=="async")] as $a | [$g[] | select(.setup=="new")] as $n |
      [range(0; [($a|length), ($n|length)] | min) | "\(($a[.].opsPerSec / ([$n[.].opsPerSec, 1e-9] | max)) * 100 | round / 100)"] | join("/"))] | @tsv)' "$results" |
  awk -F'\t' 'function r(a, b) { return b > 0 ? sprintf("%.2f", a / b) : "-" }
    { printf "%-5s %-16s %2d threads: base %6.0f  new %6.0f  readahead %6.0f  async %6.0f  cached %6.0f   new/base %s  new/cached %s  async/new %s (rounds %s)  readahead/new %s  async/readahead %s", $1, $2, $3, $4, $5, $9, $8, $6, r($5, $4), r($5, $6), r($8, $5), $10, r($9, $5), r($8, $9)
    if ($7 > 0) printf "  peer %8.0f  new/peer %s", $7, r($5, $7)
    printf "\n" }'
jq -rs '
  def mean(s): [s] | if length == 0 then 0 else add / length end;
  map(select((.name=="readrandom" or .name=="multireadrandom") and .setup != "peer")) | group_by([.latency, .setup, .threads])[] | . as $g | [$g[0].latency, $g[0].setup, $g[0].threads,
    mean($g[] | select(.name=="readrandom") | .opsPerSec), mean($g[] | select(.name=="multireadrandom") | .opsPerSec)] | @tsv' "$results" |
  awk -F'\t' '{ printf "%-5s %-7s %2d threads: MultiGet of 32 %8.0f keys/s vs Gets %8.0f keys/s: %sx\n", $1, $2, $3, $5, $4, ($4 > 0 ? sprintf("%.2f", $5/$4) : "-") }'
