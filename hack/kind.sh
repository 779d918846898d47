#!/usr/bin/env bash
# The kind cluster Shale develops against, from the offline node image.
#
#   hack/kind.sh up       create cluster $KIND_CLUSTER (default shale) and wait
#                         until its nodes are Ready and CoreDNS runs;
#                         KIND_WORKERS=N adds N worker nodes to a new cluster
#                         (default 0: one node, the control plane, which then
#                         runs everything)
#   hack/kind.sh load     load Shale's images (hack/images.sh --print) into it
#   hack/kind.sh down     delete it
#   hack/kind.sh env      print the environment to use kubectl/kind/helm on it
#
# The kubeconfig is kept in the cache ($cache/kind/<cluster>/kubeconfig), not
# merged into ~/.kube/config.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

cluster=${KIND_CLUSTER:-shale}
workers=${KIND_WORKERS:-0}
[[ $workers =~ ^[0-9]+$ ]] || die "KIND_WORKERS=$workers: want a number of worker nodes (0 for a single-node cluster)"
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

pod_subnet=10.244.0.0/16
service_subnet=10.96.0.0/16

# contain_cluster_traffic keeps traffic meant for the pod and Service ranges
# inside the node when the node cannot deliver it. The static CNI set-up has
# no route for the pod range as a whole, and kube-proxy rewrites Service
# addresses only while it has rules for them: a connection to a Pod that is
# gone (kube-proxy still sends new connections to a terminating Pod whose
# network is torn down), or to a ClusterIP while kube-proxy resyncs, left
# the node by its default route, and on our machines a foreign HTTP/2
# server answered there (a client stayed connected to it, getting 404s).
# So: an "unreachable" route for the pod range (each live Pod has its own,
# more specific route), and a REJECT of Service addresses kube-proxy did not
# rewrite (the filter table sees packets after kube-proxy's DNAT, so only
# those match; a route would not do, as the node's own connections look
# the route up before the rewrite). Idempotent; not kept across a restart
# of the node container, so `up` sets it again on an existing cluster.
contain_cluster_traffic() {
  local node=$1 chain rule
  docker exec "$node" ip route replace unreachable "$pod_subnet"
  for chain in OUTPUT FORWARD; do
    rule="$chain -d $service_subnet -m comment --comment shale-unrewritten-service-traffic -j REJECT --reject-with icmp-host-unreachable"
    # shellcheck disable=SC2086 # the rule is a list of iptables words
    docker exec "$node" sh -c "iptables -w -C $rule 2>/dev/null || iptables -w -I $rule"
  done
}

nodes() { "$kind" get nodes --name "$cluster"; }

# route_pods gives each node of a multi-node cluster its own pod range and
# routes to the others'. The node image's static CNI config (no kindnetd
# offline: hack/node-image.sh) hands out 10.244.0.0/24 on every node, the
# control plane's range; the controller manager gives each node its own
# /24 (spec.podCIDR), so each node's config is rewritten to that range, and
# each node gets a route to every other node's range through that node's
# address on the docker network (what kindnetd would do). Pods created
# before the rewrite (CoreDNS) would hold addresses of the wrong range:
# they are recreated. Idempotent, and a no-op on a single node.
route_pods() {
  local names node cidr ip other conf changed=0
  mapfile -t names < <(nodes)
  [ "${#names[@]}" -gt 1 ] || return 0
  declare -A cidrs ips
  for node in "${names[@]}"; do
    for _ in $(seq 1 60); do
      cidr=$("$kubectl" get node "$node" -o 'jsonpath={.spec.podCIDR}' 2>/dev/null || true)
      [ -n "$cidr" ] && break
      sleep 2
    done
    [ -n "$cidr" ] || die "node $node has no spec.podCIDR after 2 minutes"
    cidrs[$node]=$cidr
    ips[$node]=$(docker inspect -f '{{with index .NetworkSettings.Networks "kind"}}{{.IPAddress}}{{end}}' "$node")
    [ -n "${ips[$node]}" ] || die "node $node has no address on the docker network kind"
  done
  for node in "${names[@]}"; do
    conf=/etc/cni/net.d/10-shale-ptp.conflist
    if ! docker exec "$node" grep -q "\"subnet\": \"${cidrs[$node]}\"" "$conf"; then
      docker exec "$node" sed -i "s#\"subnet\": \"[0-9./]*\"#\"subnet\": \"${cidrs[$node]}\"#" "$conf"
      log "node $node: pods in ${cidrs[$node]}"
      changed=1
    fi
    for other in "${names[@]}"; do
      [ "$other" = "$node" ] && continue
      docker exec "$node" ip route replace "${cidrs[$other]}" via "${ips[$other]}"
    done
  done
  # Cluster DNS on the control plane (it tolerates its taint), not on the
  # workers the node steps of the e2e freeze: a CoreDNS replica on a frozen
  # node times out every other lookup until the node controller takes it
  # out of the Service (40 s), and a new primary that cannot resolve its
  # store's name in time exits (see docs/kubernetes.md, "Node loss").
  local pin='{"spec":{"template":{"spec":{"nodeSelector":{"node-role.kubernetes.io/control-plane":""}}}}}'
  if ! "$kubectl" -n kube-system get deployment coredns -o 'jsonpath={.spec.template.spec.nodeSelector}' | grep -q control-plane; then
    "$kubectl" -n kube-system patch deployment coredns --type merge -p "$pin" >/dev/null
    log "CoreDNS pinned to the control plane"
  elif [ "$changed" = 1 ]; then
    # Pods made with the image's range before the rewrite.
    "$kubectl" -n kube-system delete pod -l k8s-app=kube-dns --wait=false >/dev/null
  fi
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
  podSubnet: $pod_subnet
  serviceSubnet: $service_subnet
nodes:
  - role: control-plane
$(for _ in $(seq 1 "$workers"); do echo "  - role: worker"; done)
EOF
    log "creating cluster $cluster from $image ($workers workers)"
    "$kind" create cluster --name "$cluster" --image "$image" --config "$config" \
      --kubeconfig "$kubeconfig" --wait 0s
  fi
  for node in $(nodes); do contain_cluster_traffic "$node"; done
  route_pods
  log "waiting for the nodes to be Ready and CoreDNS to run"
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
