#!/usr/bin/env bash
# Makes sure a Docker daemon is running that can start privileged containers
# (kind runs its nodes privileged). Idempotent: with a working daemon it only
# checks.
#
# - Installs Debian's docker.io if there is no dockerd.
# - If this process's capability bounding set lacks capabilities that Docker
#   grants privileged containers (CAP_SYS_RESOURCE on our CI machines), runc
#   fails every privileged container. Only then, builds hack/runc-capdrop
#   into the cache and makes it dockerd's default runtime. On a normal host
#   the daemon is started (or left) exactly as Debian ships it.
# - Starts dockerd in the background when none runs and no service manager
#   owns it; logs go to $cache/logs/dockerd.log.
#
#   hack/docker.sh           ensure the daemon
#   hack/docker.sh --check   only report whether it is usable (exit 1 if not)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

runtime_name=shale-runc
daemon_log=$cache/logs/dockerd.log
mkdir -p "$cache/logs"

# Every capability up to CAP_CHECKPOINT_RESTORE (40): what Docker 20.10 hands
# a privileged container.
full_caps=$(( (1 << 41) - 1 ))
bounding=$(( 16#$(awk '/^CapBnd:/ {print $2}' /proc/self/status) ))
missing_caps=$(( full_caps & ~bounding ))

daemon_ok() { docker info >/dev/null 2>&1; }

# probe_privileged: the real test of what kind needs. Runs a nonexistent
# program in an empty privileged container: a runtime that got as far as exec
# says "no such file"; one that could not apply the capabilities says so.
probe_privileged() {
  local img=$IMAGE_PREFIX/empty:probe err=$cache/logs/privileged-probe.err
  if ! docker image inspect "$img" >/dev/null 2>&1; then
    tar -c -f - -T /dev/null | docker import - "$img" >/dev/null
  fi
  docker run --rm --privileged --network=none --entrypoint=/nonexistent "$img" >/dev/null 2>"$err" || true
  if grep -q 'apply caps' "$err"; then
    die "this dockerd cannot start privileged containers: $(tr '\n' ' ' <"$err")"
  fi
  grep -q 'nonexistent' "$err" || die "unexpected result of the privileged probe: $(tr '\n' ' ' <"$err")"
}

default_runtime() { docker info --format '{{.DefaultRuntime}}' 2>/dev/null; }

if [ "${1:-}" = --check ]; then
  daemon_ok || { echo "no Docker daemon answers (run make docker)"; exit 1; }
  if [ "$missing_caps" -ne 0 ] && [ "$(default_runtime)" != "$runtime_name" ]; then
    echo "this host lacks capabilities (mask $(printf '%x' "$missing_caps")) and dockerd's default runtime is not $runtime_name"
    exit 1
  fi
  exit 0
fi

# --- docker.io ----------------------------------------------------------------
if [ ! -x /usr/sbin/dockerd ] && ! command -v dockerd >/dev/null 2>&1; then
  apt_install docker.io
fi
apt_install iptables runc containerd
[ -x "$DOCKER" ] || die "$DOCKER is missing after installing docker.io"

# --- the runc wrapper, only when this host needs it -------------------------
args=()
if [ "$missing_caps" -ne 0 ]; then
  src=$repo/hack/runc-capdrop/main.go
  sum=$(sha256sum "$src" | cut -c1-12)
  wrapper=$cache/docker/runc-capdrop-$sum
  if [ ! -x "$wrapper" ]; then
    log "building the runc wrapper (this host's bounding set lacks capability mask $(printf '%x' "$missing_caps"))"
    mkdir -p "$cache/docker"
    (cd "$repo" && CGO_ENABLED=0 go build -trimpath -o "$wrapper.tmp" ./hack/runc-capdrop)
    mv "$wrapper.tmp" "$wrapper"
  fi
  ln -sfn "$wrapper" "$cache/docker/runc-capdrop"
  args=(--add-runtime "$runtime_name=$cache/docker/runc-capdrop" --default-runtime "$runtime_name")
fi

# --- the daemon -----------------------------------------------------------------
if daemon_ok; then
  if [ ${#args[@]} -gt 0 ] && [ "$(default_runtime)" != "$runtime_name" ]; then
    die "a Docker daemon is running whose default runtime ($(default_runtime)) cannot start privileged containers on this host (capability mask $(printf '%x' "$missing_caps") is missing); restart it with: dockerd ${args[*]}"
  fi
  probe_privileged
  log "ok: Docker $(docker version --format '{{.Server.Version}}') is running (default runtime $(default_runtime))"
  exit 0
fi

if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ] && [ ${#args[@]} -eq 0 ]; then
  log "starting docker.service"
  as_root systemctl start docker
else
  # No service manager here (containers, CI sandboxes): run it ourselves.
  pidfile=/var/run/docker.pid
  if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    die "dockerd (pid $(cat "$pidfile")) is running but does not answer; see $daemon_log"
  fi
  log "starting dockerd ${args[*]} (log: $daemon_log)"
  as_root setsid nohup /usr/sbin/dockerd "${args[@]}" >>"$daemon_log" 2>&1 </dev/null &
fi
for _ in $(seq 1 60); do
  daemon_ok && break
  sleep 1
done
daemon_ok || die "dockerd did not come up within 60s; see $daemon_log"
probe_privileged
log "ok: Docker $(docker version --format '{{.Server.Version}}') is running (default runtime $(default_runtime))"
