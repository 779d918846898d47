#!/usr/bin/env bash
# The kind cluster Shale develops against, from the offline node image.
#
#   hack/kind.sh up       create cluster $KIND_CLUSTER (default shale) and wait
#                         until its node is Ready and CoreDNS runs
#   hack/kind.sh load     load Shale's images (hack/images.sh --print) into it
#   hack/kind.sh down     delete it
#   hack/kind.sh env      print the environment to use kubectl/kind/helm on it
#
# The kubeconfig is kept in the cache ($cache/kind/<cluster>/kubeconfig), not
# merged into ~/.kube/config.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

cluster=${KIND_CLUSTER:-shale}
kind=$(kind_bin)
kubectl=$(k8s_bin_dir)/kubectl
kubeconfig=$cache/kind/$cluster/kubeconfig
export KUBECONFIG=$kubeconfig

# kind runs `docker` from PATH; make it Debian's, matching the daemon.
shim=$cache/kind/bin
mkdir -p "$shim"
ln -sfn "$DOCKER" "$shim/docker"
export PATH=$shim:$PATH

# kind and kubectl come from the cache (built once per version).
"$repo/hack/k8s-binaries.sh" kind kubectl >/dev/null 2>&1 || "$repo/hack/k8s-binaries.sh" kind kubectl

exists() { "$kind" get clusters 2>/dev/null | grep -qx "$cluster"; }

# The network kind would create takes 172.18.0.0/16-ish ranges that may clash
# on hosts that already run a Docker; kind reuses a network named "kind".
ensure_network() {
  docker network inspect kind >/dev/null 2>&1 && return
  log "creating the docker network kind (172.30.0.0/16)"
  docker network create -d bridge --ipv6 \
    --subnet 172.30.0.0/16 --gateway 172.30.0.1 \
    --subnet fc00:f853:ccd:e793::/64 kind >/dev/null
}

up() {
  local image config
  image=$("$repo/hack/node-image.sh" --tag)
  docker image inspect "$image" >/dev/null 2>&1 || die "node image $image is missing: run make kind-node-image"
  [ -x "$kind" ] && [ -x "$kubectl" ] || die "kind or kubectl is missing: run make k8s-binaries"
  if exists; then
    log "cluster $cluster exists"
  else
    ensure_network
    mkdir -p "$(dirname "$kubeconfig")"
    config=$cache/kind/$cluster/config.yaml
    # No kindnetd offline: the node image carries a static CNI config for
    # this pod subnet (see hack/node-image.sh).
    cat >"$config" <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  disableDefaultCNI: true
  podSubnet: 10.244.0.0/16
nodes:
  - role: control-plane
EOF
    log "creating cluster $cluster from $image"
    "$kind" create cluster --name "$cluster" --image "$image" --config "$config" \
      --kubeconfig "$kubeconfig" --wait 0s
  fi
  log "waiting for the node to be Ready and CoreDNS to run"
  "$kubectl" wait --for=condition=Ready node --all --timeout=180s >/dev/null
  "$kubectl" -n kube-system rollout status deployment/coredns --timeout=180s >/dev/null
  log "ok: cluster $cluster is up; $(env_hint)"
}

load() {
  exists || die "cluster $cluster does not exist: run make kind-up"
  local images
  mapfile -t images < <("$repo/hack/images.sh" --print)
  log "loading ${images[*]} into $cluster"
  "$kind" load docker-image --name "$cluster" "${images[@]}"
}

down() {
  if exists; then
    "$kind" delete cluster --name "$cluster" --kubeconfig "$kubeconfig"
  else
    log "cluster $cluster does not exist"
  fi
  rm -rf "${cache:?}/kind/$cluster"
}

env_hint() { printf 'export KUBECONFIG=%s PATH=%s:%s:%s:$PATH' "$kubeconfig" "$(k8s_bin_dir)" "$(dirname "$kind")" "$(dirname "$(helm_bin)")"; }

case ${1:-} in
  up) up ;;
  load) load ;;
  down) down ;;
  env) env_hint; echo ;;
  *) die "usage: $0 up|load|down|env" ;;
esac
