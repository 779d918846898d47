#!/usr/bin/env bash
# Builds RocksDB $ROCKSDB_VERSION from Debian's own source package (with
# Debian's patches) as a static library, once per machine, into the cache.
#
#   hack/rocksdb.sh            build librocksdb.a if missing; instant when cached
#   hack/rocksdb.sh tools      also db_bench, ldb and sst_dump (on demand only,
#                              so `make test` never waits for them)
#   hack/rocksdb.sh --print    print the prefix (include/, lib/, bin/)
#   hack/rocksdb.sh --cflags   print CGO_CFLAGS (also CGO_CXXFLAGS: cgo builds
#                              the shim's .cc files with CGO_CXXFLAGS only)
#   hack/rocksdb.sh --ldflags  print CGO_LDFLAGS
#   hack/rocksdb.sh --cgo-env  print `export CGO_...=...` lines for eval
#                              (the Makefile and hack/*.sh set these; nothing
#                              else is needed to build against this RocksDB)
#
# Layout: $cache/rocksdb-<version>/{include,lib/librocksdb.a,bin,.stamp}, and
# in lib/ links to bookworm's static compression archives (libz.a, ...). The
# stamp holds the recipe (version, source hashes, patches, cmake flags); a
# changed recipe rebuilds from scratch. The unpacked tree and its object files
# stay in $cache/build/rocksdb-<debian version> so `tools` reuses them.
#
# The first build of the library took 20 minutes (1200 s) on 2 cores shared
# with other work (it runs at nice 19, -j2); see the README.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

prefix=$cache/rocksdb-$ROCKSDB_VERSION

# Static link: lib/ holds librocksdb.a and links to the compression
# libraries' and liburing's static archives and no shared library, and the
# linker searches -L directories before the system's, so every -lNAME of
# these (grocksdb's own #cgo flags name some) resolves to an archive: the
# binaries need no shared library beyond glibc and libstdc++.
static_libs=(z snappy lz4 zstd bz2 uring)
# "-g -O2" is cgo's default for each of these variables, kept.
cgo_cflags() { printf '%s' "-g -O2 -I$prefix/include"; }
cgo_ldflags() {
  printf '%s' "-g -O2 -L$prefix/lib -lrocksdb -lz -lsnappy -llz4 -lzstd -lbz2 -luring -lstdc++ -lm -lpthread -ldl"
}

case "${1:-}" in
  --print) echo "$prefix"; exit 0 ;;
  --cflags) cgo_cflags; echo; exit 0 ;;
  --ldflags) cgo_ldflags; echo; exit 0 ;;
  --cgo-env)
    printf 'export CGO_CFLAGS=%q CGO_CXXFLAGS=%q CGO_LDFLAGS=%q\n' "$(cgo_cflags)" "$(cgo_cflags)" "$(cgo_ldflags)"
    exit 0 ;;
  ''|tools) ;;
  *) die "unknown argument '$1' (use: no argument, tools, --print, --cflags, --ldflags or --cgo-env)" ;;
esac
want_tools=false
[ "${1:-}" = tools ] && want_tools=true

# Debian's source package; its files are checked against these hashes and
# against the Sources index apt verified with Debian's archive key.
deb_version=$ROCKSDB_VERSION-$ROCKSDB_DEBIAN_REVISION
orig=rocksdb_$ROCKSDB_VERSION.orig.tar.gz
debtar=rocksdb_$deb_version.debian.tar.xz

# Debian's debian/patches/series, applied in order with patch -p1. All of
# them apply: the arm/mips/ppc64 ones only touch the range-lock portability
# header (no effect on amd64), library_version only the shared library's
# soname, no_rpath the tools' rpath, build_reproducible the Makefile (unused
# by cmake), and three are upstream fixes (missing <cstdint> includes, a
# build fix). None is skipped.
#
# The cmake flags: a Release static library with the compression libraries
# and io_uring from bookworm; RTTI on because the shim subclasses RocksDB
# classes (FileSystemWrapper, CompactionService) and is compiled with RTTI, so
# it needs their typeinfo; PORTABLE so the images run on any x86-64; the
# tools' targets are configured (but only built on demand) so that building
# them later reuses the library's objects.
cmake_flags=(
  -DCMAKE_BUILD_TYPE=Release -DUSE_RTTI=ON -DPORTABLE=1 -DFAIL_ON_WARNINGS=OFF
  -DROCKSDB_BUILD_SHARED=OFF -DWITH_GFLAGS=ON
  -DWITH_SNAPPY=ON -DWITH_LZ4=ON -DWITH_ZSTD=ON -DWITH_ZLIB=ON -DWITH_BZ2=ON
  -DWITH_LIBURING=ON -DWITH_JEMALLOC=OFF
  -DWITH_TESTS=OFF -DWITH_ALL_TESTS=OFF -DWITH_BENCHMARK_TOOLS=ON
  -DWITH_CORE_TOOLS=ON -DWITH_TOOLS=OFF -DWITH_TRACE_TOOLS=OFF
  -DWITH_EXAMPLES=OFF -DWITH_JNI=OFF
)
recipe="rocksdb $deb_version
orig $ROCKSDB_ORIG_SHA256
debian $ROCKSDB_DEBIAN_SHA256
patches debian/patches/series, all
cmake ${cmake_flags[*]}
make -j2 rocksdb (tools: db_bench ldb sst_dump)"

lib_ready() {
  [ -f "$prefix/lib/librocksdb.a" ] && [ "$(cat "$prefix/.stamp" 2>/dev/null)" = "$recipe" ] || return 1
  local l
  for l in "${static_libs[@]}"; do [ -e "$prefix/lib/lib$l.a" ] || return 1; done
}
tools_ready() { [ -x "$prefix/bin/db_bench" ] && [ -x "$prefix/bin/ldb" ] && [ -x "$prefix/bin/sst_dump" ]; }

if lib_ready && { ! $want_tools || tools_ready; }; then
  exit 0
fi

# One build per machine at a time (worktrees share the cache).
exec 9>"$cache/rocksdb.lock"
flock 9
if lib_ready && { ! $want_tools || tools_ready; }; then
  exit 0
fi

apt_install build-essential cmake libgflags-dev liburing-dev \
  libzstd-dev liblz4-dev zlib1g-dev libsnappy-dev libbz2-dev

# --- fetch and verify ---------------------------------------------------------
dl=$cache/downloads/rocksdb
mkdir -p "$dl"
verify() { # file sha256
  [ -f "$dl/$1" ] && [ "$(sha256sum "$dl/$1" | cut -d' ' -f1)" = "$2" ]
}
if ! verify "$orig" "$ROCKSDB_ORIG_SHA256" || ! verify "$debtar" "$ROCKSDB_DEBIAN_SHA256"; then
  # The machine's own Debian mirror, with a private apt state: the system's
  # apt configuration is never touched.
  mirror=$(grep -rhoE 'https?://[^ ]*/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null |
    grep -v -- -security | head -n1 | tr -d ' ') || true
  mirror=${mirror:-http://deb.debian.org/debian}
  apt_dir=$(mktemp -d "$cache/rocksdb-apt.XXXXXX")
  trap 'rm -rf "$apt_dir"' EXIT
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  apt_opts=(-o "Dir::Etc::sourcelist=$apt_dir/src.list" -o Dir::Etc::sourceparts=/dev/null
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o APT::Sandbox::User=root)
  found=
  for suite in ${ROCKSDB_DEBIAN_SUITES//,/ }; do
    echo "deb-src $mirror $suite main" >"$apt_dir/src.list"
    log "looking for rocksdb $deb_version in $mirror $suite"
    apt-get "${apt_opts[@]}" update -qq >/dev/null 2>&1 || { log "could not read $suite's index"; continue; }
    # The Sources index (signed through InRelease) names each file's hash.
    idx=$(apt-cache "${apt_opts[@]}" showsrc rocksdb 2>/dev/null | awk -v v="$deb_version" '
      /^$/ { ok = 0; sums = 0 }
      /^Version: / { ok = ($2 == v) }
      /^[^ ]/ { sums = /^Checksums-Sha256:/ }
      ok && sums' 2>/dev/null) || true
    if printf '%s\n' "$idx" | grep -q " $orig\$"; then found=$suite; break; fi
  done
  [ -n "$found" ] || die "Debian's rocksdb $deb_version is in none of: $ROCKSDB_DEBIAN_SUITES at $mirror.
  Debian may have moved on: take ROCKSDB_DEBIAN_SUITES/the version in hack/versions.env from
  https://tracker.debian.org/pkg/rocksdb, or put $orig and $debtar into $dl by hand."
  for f in "$orig:$ROCKSDB_ORIG_SHA256" "$debtar:$ROCKSDB_DEBIAN_SHA256"; do
    name=${f%%:*} want=${f#*:}
    printf '%s\n' "$idx" | grep -q "^ $want [0-9]* $name\$" ||
      die "Debian's index lists another sha256 for $name than hack/versions.env pins ($want):
$idx"
  done
  # The .dsc may answer 404 on the mirror (seen on deb.debian.org), so apt's
  # exit status is not trusted; the two files it needs are checked below.
  (cd "$apt_dir" && apt-get "${apt_opts[@]}" source --download-only -qq "rocksdb=$deb_version" >/dev/null 2>&1) || true
  for f in "$orig" "$debtar"; do
    [ -f "$apt_dir/$f" ] || die "apt-get source did not download $f from $mirror ($found)"
    mv -f "$apt_dir/$f" "$dl/$f"
  done
  verify "$orig" "$ROCKSDB_ORIG_SHA256" || die "$orig: sha256 mismatch after download"
  verify "$debtar" "$ROCKSDB_DEBIAN_SHA256" || die "$debtar: sha256 mismatch after download"
  log "downloaded and verified $orig and $debtar ($found)"
fi

# --- unpack, patch, configure --------------------------------------------------
work=$cache/build/rocksdb-$deb_version
if [ "$(cat "$work/.recipe" 2>/dev/null)" != "$recipe" ]; then
  rm -rf "$work"
  mkdir -p "$work/src"
  tar -xzf "$dl/$orig" -C "$work/src" --strip-components=1
  tar -xJf "$dl/$debtar" -C "$work/src"
  while read -r p; do
    case $p in ''|'#'*) continue ;; esac
    patch -d "$work/src" -p1 -s --no-backup-if-mismatch <"$work/src/debian/patches/$p" ||
      die "Debian patch $p does not apply"
  done <"$work/src/debian/patches/series"
  nicely cmake -S "$work/src" -B "$work/build" "${cmake_flags[@]}" >"$work/cmake.log" 2>&1 ||
    die "cmake failed; see $work/cmake.log"
  echo "$recipe" >"$work/.recipe"
fi

build() { # target...
  nice -n 19 make -C "$work/build" -j2 "$@" >>"$work/make.log" 2>&1 ||
    die "make $* failed; see the end of $work/make.log"
}

# --- the library -----------------------------------------------------------------
if ! lib_ready; then
  log "building librocksdb.a $deb_version (once per machine: about 20 minutes on 2 cores)"
  start=$(date +%s)
  build rocksdb
  tmp=$(mktemp -d "$cache/rocksdb-install.XXXXXX")
  chmod 755 "$tmp"
  mkdir -p "$tmp/lib" "$tmp/include" "$tmp/bin"
  cp -a "$work/src/include/rocksdb" "$tmp/include/"
  cp "$work/build/librocksdb.a" "$tmp/lib/"
  for l in "${static_libs[@]}"; do
    a=$(realpath -m "$(gcc -print-file-name="lib$l.a")")
    [ -f "$a" ] || die "lib$l.a not found (its Debian -dev package ships it; run hack/install-deps.sh)"
    ln -s "$a" "$tmp/lib/lib$l.a"
  done
  echo "$recipe" >"$tmp/.stamp"
  rm -rf "$prefix"
  mv "$tmp" "$prefix"
  log "librocksdb.a built in $(($(date +%s) - start))s: $prefix"
fi

# --- tools, on demand --------------------------------------------------------------
if $want_tools && ! tools_ready; then
  log "building db_bench, ldb, sst_dump (first time only)"
  start=$(date +%s)
  build db_bench ldb sst_dump
  for t in db_bench tools/ldb tools/sst_dump; do
    install -m 0755 "$work/build/$t" "$prefix/bin/$(basename "$t").tmp"
    mv -f "$prefix/bin/$(basename "$t").tmp" "$prefix/bin/$(basename "$t")"
  done
  log "tools built in $(($(date +%s) - start))s: $prefix/bin"
fi
