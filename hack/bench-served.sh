#!/usr/bin/env bash
# make bench-served: CPU per unary Put and Get of `shale primary` on a MinIO
# server on loopback, under `shale bench` (16 threads, 20 B keys, 400 B
# values compressible to half, sync=false puts): fillrandom then readrandom
# of NUM operations (default 200000) over NUM keys.
#
# This tree's primary runs twice per round: plaintext, and with TLS 1.3 and
# client certificates (certificates from `shale admin`, an access file
# granting the bench client write), so the TLS cost comes from one run on
# one machine: the summary gives server and client CPU per op with and
# without TLS and their ratio. TLS=0 skips the TLS runs.
#
# With BASE=<git ref> it also builds that revision's `shale` and runs it as
# another primary (plaintext), alternating with this tree's, ROUNDS times
# (default 2), so that the before/after figures come from one run on one
# machine. The client is always this tree's `shale bench`. Server CPU per op
# is the primary's utime+stime from /proc/<pid>/stat over the benchmark
# (through process_cpu_seconds_total), client CPU per op the bench
# process's own.
#
#   BASE=main make bench-served
#   NUM=50000 ROUNDS=1 make bench-served  # a quick look
#   PROFILE=/tmp/prof make bench-served   # also a 20 s CPU profile of each
#                                         # benchmark of this tree's primary
#   SERVED_JSON=/tmp/served.jsonl         # one JSON object per benchmark
#   INSTRUCTIONS=1 BASE=main make bench-served
#       instead: instructions per Put and per Get of each build's primary
#       (plaintext, file:// store) under valgrind's callgrind, which the
#       machine's load does not move: warmed with IWARM (5000) Puts, then
#       counted over INUM (5000) Puts and INUM Gets from `shale bench`
#       (16 threads), the whole server process, user space only.
#       CALLGRIND_OUT=<dir> keeps the profiles there (callgrind_annotate).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
NUM=${NUM:-200000}
ROUNDS=${ROUNDS:-2}
TLS=${TLS:-1}
work=$(mktemp -d "${TMPDIR:-/tmp}/shale-served.XXXXXX")
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

go build -o "$work/new/shale" "$repo/cmd/shale"
# A build runs as build[:tls]; only this tree's has TLS.
builds=(new)
[ "$TLS" = 1 ] && builds+=(new:tls)
if [ -n "${BASE:-}" ]; then
  mkdir -p "$work/base-src"
  git -C "$repo" archive "$BASE" | tar -x -C "$work/base-src"
  base_build "$work/base-src" "$work/base/shale" ./cmd/shale
  builds=(base "${builds[@]}")
fi

shale=$work/new/shale

# instructions BUILD: the primary of BUILD under callgrind, instrumentation off
# until the warm-up is done; prints "BUILD put N get N" (per op).
instructions() {
  local b=$1 kv out n=${INUM:-5000}
  kv=$(freeport)
  out=$work/callgrind-$b
  mkdir -p "$out"
  # Go preempts with signals, which callgrind cannot follow.
  GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out/cg.%p" \
    "$work/$b/shale" primary --db "file://$work/db-$b" --cache-dir "$work/cache-cg-$b" \
    --listen "127.0.0.1:$kv" --metrics-listen 127.0.0.1:0 >"$work/callgrind-$b.log" 2>&1 &
  local vpid=$!
  pids+=("$vpid")
  for _ in $(seq 1200); do "$shale" kv --addr "127.0.0.1:$kv" status >/dev/null 2>&1 && break; sleep 0.1; done
  run() {
    "$shale" bench --addr "127.0.0.1:$kv" --benchmarks "$1" --num "$2" --keys "$n" --threads 16 --key-size 20 \
      --value-size 400 --compression-ratio 0.5 --seed 1 --progress-interval 1h -o json >/dev/null 2>>"$work/bench.log"
  }
  run fillrandom "${IWARM:-5000}"
  local per=()
  for bench in fillrandom readrandom; do
    callgrind_control -z "$vpid" >/dev/null 2>&1
    callgrind_control -i on "$vpid" >/dev/null 2>&1
    run "$bench" "$n"
    callgrind_control -i off "$vpid" >/dev/null 2>&1
    rm -f "$out"/cg.*
    callgrind_control -d "$vpid" >/dev/null 2>&1
    # The dump is written when a thread of the process next runs.
    for _ in $(seq 600); do grep -qs '^totals:' "$out"/cg.* && break; sleep 0.1; done
    local total
    total=$(cat "$out"/cg.* | awk '/^totals:/ {s += $2} END {print s+0}')
    if [ -n "${CALLGRIND_OUT:-}" ]; then
      mkdir -p "$CALLGRIND_OUT"
      for f in "$out"/cg.*; do cp "$f" "$CALLGRIND_OUT/$b-$bench.${f##*/}"; done
    fi
    per+=("$((total / n))")
  done
  kill "$vpid"
  wait "$vpid" 2>/dev/null || true
  echo "$b put ${per[0]} get ${per[1]}"
}
if [ "${INSTRUCTIONS:-0}" = 1 ]; then
  command -v valgrind >/dev/null || { echo "bench-served: INSTRUCTIONS=1 needs valgrind (apt-get install valgrind)" >&2; exit 1; }
  lines=()
  for b in ${BASE:+base} new; do lines+=("$(instructions "$b")"); done
  printf '%s\n' "${lines[@]}"
  if [ -n "${BASE:-}" ]; then
    printf '%s\n' "${lines[@]}" | awk '{ p[$1] = $3; g[$1] = $5 }
      END { printf "# instructions per op, base -> new (ratio): Put %d -> %d (%.3f), Get %d -> %d (%.3f)\n", p["base"], p["new"], p["new"]/p["base"], g["base"], g["new"], g["new"]/g["base"] }'
  fi
  exit 0
fi

pki=$work/pki
if [ "$TLS" = 1 ]; then
  "$shale" admin ca create --out "$pki/ca" >/dev/null
  "$shale" admin cert issue --ca "$pki/ca" --kind client --name bench --client bench --out "$pki/client" >/dev/null
  echo '{"clients": [{"name": "bench", "role": "write"}]}' >"$pki/access.json"
fi

bench_minio
echo "# MinIO on 127.0.0.1:$port; NUM=$NUM, ROUNDS=$ROUNDS, builds: ${builds[*]}${BASE:+ (base: $BASE)}" >&2

results=$work/results.jsonl
: >"$results"
for round in $(seq "$ROUNDS"); do
  for variant in "${builds[@]}"; do
    b=${variant%%:*}
    mode=plain
    [ "$variant" != "$b" ] && mode=tls
    name=$b-$mode-$round
    kv=$(freeport); m=$(freeport)
    extra=() client=()
    [ -n "${PROFILE:-}" ] && [ "$b" = new ] && extra=(--pprof)
    if [ "$mode" = tls ]; then
      "$shale" admin cert issue --ca "$pki/ca" --kind primary --name bench --db "s3://bench/$name" --out "$pki/$name" >/dev/null
      extra+=(--tls-cert "$pki/$name/tls.crt" --tls-key "$pki/$name/tls.key" --tls-ca "$pki/$name/ca.crt" --access-file "$pki/access.json")
      client=(--tls-ca "$pki/ca/ca.crt" --tls-cert "$pki/client/tls.crt" --tls-key "$pki/client/tls.key")
    fi
    "$work/$b/shale" primary --db "s3://bench/$name" --cache-dir "$work/cache-$name" \
      --listen "127.0.0.1:$kv" --metrics-listen "127.0.0.1:$m" "${extra[@]}" >"$work/primary-$name.log" 2>&1 &
    ppid=$!
    pids+=("$ppid")
    for _ in $(seq 600); do "$shale" kv --addr "127.0.0.1:$kv" "${client[@]}" status >/dev/null 2>&1 && break; sleep 0.1; done
    for bench in fillrandom readrandom; do
      prof_pid=
      if [ -n "${PROFILE:-}" ] && [ "$b" = new ]; then
        mkdir -p "$PROFILE"
        curl -fs -o "$PROFILE/$bench-$mode-$round.pprof" "http://127.0.0.1:$m/debug/pprof/profile?seconds=20" &
        prof_pid=$!
      fi
      "$shale" bench --addr "127.0.0.1:$kv" "${client[@]}" --server-metrics "127.0.0.1:$m" --benchmarks "$bench" \
        --num "$NUM" --keys "$NUM" --threads 16 --key-size 20 --value-size 400 --compression-ratio 0.5 --seed "$round" \
        --progress-interval 1h -o json 2>>"$work/bench.log" |
        jq -c --arg build "$b" --arg mode "$mode" --argjson round "$round" '.benchmarks[] | {build: $build, mode: $mode, round: $round, name, opsPerSec,
          clientCpuMicrosPerOp, serverCpuMicrosPerOp, p50: .latencyMicros.p50, p99: .latencyMicros.p99, errors}' >>"$results"
      [ -n "$prof_pid" ] && wait "$prof_pid"
    done
    kill "$ppid"
    wait "$ppid" 2>/dev/null || true
  done
done
[ -n "${SERVED_JSON:-}" ] && cp "$results" "$SERVED_JSON"

printf '\n%-6s %-5s %-5s %-11s %10s %13s %13s %8s %8s\n' build mode round benchmark ops/s "client µs/op" "server µs/op" "p50 µs" "p99 µs"
jq -r '[.build, .mode, .round, .name, (.opsPerSec|floor), (.clientCpuMicrosPerOp*10|round/10), (.serverCpuMicrosPerOp*10|round/10), (.p50|floor), (.p99|floor)] | @tsv' "$results" |
  awk -F'\t' '{ printf "%-6s %-5s %-5s %-11s %10d %13.1f %13.1f %8d %8d\n", $1, $2, $3, $4, $5, $6, $7, $8, $9 }'
if [ "$TLS" = 1 ]; then
  echo
  echo "# TLS cost: this tree's primary, means over the rounds; ratio = TLS / plaintext"
  jq -rs 'map(select(.build=="new")) | group_by(.name)[] | . as $g | [$g[0].name,
      ([$g[] | select(.mode=="plain") | .serverCpuMicrosPerOp] | add/length),
      ([$g[] | select(.mode=="tls") | .serverCpuMicrosPerOp] | add/length),
      ([$g[] | select(.mode=="plain") | .clientCpuMicrosPerOp] | add/length),
      ([$g[] | select(.mode=="tls") | .clientCpuMicrosPerOp] | add/length),
      ([$g[] | select(.mode=="plain") | .opsPerSec] | add/length),
      ([$g[] | select(.mode=="tls") | .opsPerSec] | add/length)] | @tsv' "$results" |
    awk -F'\t' 'BEGIN { printf "%-11s %22s %22s %22s\n", "benchmark", "server µs/op plain→TLS", "client µs/op plain→TLS", "ops/s plain→TLS" }
      { printf "%-11s %9.1f → %5.1f (%.2f) %9.1f → %5.1f (%.2f) %7d → %6d (%.2f)\n", $1, $2, $3, $3/$2, $4, $5, $5/$4, $6, $7, $7/$6 }'
fi
if [ -n "${BASE:-}" ]; then
  echo
  echo "# plaintext, means over the rounds; ratio = new / base"
  jq -rs 'map(select(.mode=="plain")) | group_by(.name)[] | . as $g | [$g[0].name,
      ([$g[] | select(.build=="base") | .serverCpuMicrosPerOp] | add/length),
      ([$g[] | select(.build=="new") | .serverCpuMicrosPerOp] | add/length),
      ([$g[] | select(.build=="base") | .clientCpuMicrosPerOp] | add/length),
      ([$g[] | select(.build=="new") | .clientCpuMicrosPerOp] | add/length),
      ([$g[] | select(.build=="base") | .opsPerSec] | add/length),
      ([$g[] | select(.build=="new") | .opsPerSec] | add/length)] | @tsv' "$results" |
    awk -F'\t' 'BEGIN { printf "%-11s %22s %22s %22s\n", "benchmark", "server µs/op base→new", "client µs/op base→new", "ops/s base→new" }
      { printf "%-11s %9.1f → %5.1f (%.2f) %9.1f → %5.1f (%.2f) %7d → %6d (%.2f)\n", $1, $2, $3, $3/$2, $4, $5, $5/$4, $6, $7, $7/$6 }'
fi
