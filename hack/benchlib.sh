# Sourced by the benchmark scripts (hack/bench-*.sh): RocksDB build flags and
# tools (hack/rocksdb.sh), and a MinIO server on a
# free loopback port with one bucket, "bench". Needs $repo (the checkout),
# $work (the run's directory) and a pids array the caller's cleanup kills.

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# bench_minio starts bin/minio on $work/minio, waits until it is ready,
# creates the bucket "bench" and exports the AWS_* variables every shale
# command reads; it sets port.
bench_minio() {
  port=$(freeport)
  export MINIO_ROOT_USER=shalebench MINIO_ROOT_PASSWORD=shalebench-secret MINIO_BROWSER=off
  MINIO_UPDATE=off MINIO_CALLHOME_ENABLE=off \
    "$repo/bin/minio" server "$work/minio" --address "127.0.0.1:$port" --console-address "127.0.0.1:0" --quiet >"$work/minio.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 300); do curl -fs "http://127.0.0.1:$port/minio/health/ready" >/dev/null && break; sleep 0.1; done
  for _ in $(seq 50); do
    curl -fs -X PUT --aws-sigv4 "aws:amz:us-east-1:s3" --user "$MINIO_ROOT_USER:$MINIO_ROOT_PASSWORD" \
      -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "http://127.0.0.1:$port/bench" >/dev/null && break
    sleep 0.2
  done
  export AWS_ENDPOINT_URL="http://127.0.0.1:$port" AWS_ACCESS_KEY_ID=$MINIO_ROOT_USER AWS_SECRET_ACCESS_KEY=$MINIO_ROOT_PASSWORD AWS_REGION=us-east-1
}

# rocksdb_env builds RocksDB if it is missing (instant when cached) and
# exports the cgo flags every build of Shale needs (hack/rocksdb.sh).
rocksdb_env() {
  "$repo/hack/rocksdb.sh"
  eval "$("$repo/hack/rocksdb.sh" --cgo-env)"
}

# rocksdb_tools puts db_bench, ldb and sst_dump of the same RocksDB build
# first on PATH, building them the first time.
rocksdb_tools() {
  "$repo/hack/rocksdb.sh" tools
  PATH=$("$repo/hack/rocksdb.sh" --print)/bin:$PATH
}

# base_build SRC OUT PKG builds PKG (./cmd/shale, ...) of another revision's
# tree SRC (BASE=<git ref>) against that revision's RocksDB: the one its own
# hack/rocksdb.sh builds, or for revisions before it existed, Debian
# bookworm's librocksdb-dev 7.8.3.
base_build() {
  local src=$1 out=$2 pkg=$3
  if [ -x "$src/hack/rocksdb.sh" ]; then
    (cd "$src" && hack/rocksdb.sh && eval "$(hack/rocksdb.sh --cgo-env)" && go build -o "$out" "$pkg")
  else
    [ -f /usr/include/rocksdb/c.h ] ||
      { echo "building BASE=${BASE:-} needs Debian's librocksdb-dev 7.8.3 (it predates hack/rocksdb.sh): apt-get install librocksdb-dev" >&2; return 1; }
    (cd "$src" && env -u CGO_CFLAGS -u CGO_CXXFLAGS -u CGO_LDFLAGS go build -o "$out" "$pkg")
  fi
}
