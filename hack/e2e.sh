#!/usr/bin/env bash
# Runs the end-to-end suite (e2e/, build tag e2e) on the kind cluster
# $KIND_CLUSTER (default shale-e2e), which `make e2e` creates first with
# `make kind-up` (node image, Shale's images, cluster, images loaded).
#
#   E2E_FOCUS=failover,gc   run only the steps with these labels (after install)
#   E2E_FAILOVER_RUNS=5     failovers measured per kind (pod deletion, SIGKILL)
#   E2E_HIBERNATE_IDLE=30s  how long the hibernate step watches MinIO serve nothing to the
#                           hibernated database (the issue's 10 minutes: 10m)
#   E2E_SWITCHOVER_RUNS=5   switchovers measured by the switchover step
#   E2E_FOCUS=soak          the soak step (E2E_SOAK_FAILOVERS=21 failovers, a mix
#                           of Pod deletion, SIGKILL and switchover); it runs only
#                           when named, never in the default run
#   E2E_HELM_SET=a=b,c=d    more chart values for the install (e.g.
#                           operator.watchPrimaryPorts=false or
#                           operator.livenessProbeInterval=0s, to compare)
#   E2E_KEEP_CLUSTER=1      keep the cluster after a passing run (a failing run
#                           always keeps it, for a look)
#   E2E_TIMEOUT=90m         go test -timeout
#   SHALE_CACHE, IMAGE_PREFIX as for every hack/ script (a separate cache and
#                           image names: a run from nothing beside your own)
#
# Before the suite it builds a second operator image (the same code with
# another version string, tagged <rev>-e2e-upgrade) for the helm upgrade
# step, and loads it into the node, with the shale image tagged the same way
# (the upgrade-primaries step).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

cluster=${KIND_CLUSTER:-shale-e2e}
kubeconfig=$cache/kind/$cluster/kubeconfig
kind=$(kind_bin)
kubectl=$(k8s_bin_dir)/kubectl
[ -f "$kubeconfig" ] && "$kind" get clusters 2>/dev/null | grep -qx "$cluster" ||
  die "cluster $cluster does not exist: run make e2e (or make kind-up KIND_CLUSTER=$cluster)"
helm=$("$repo/hack/chart.sh" helm)

# kind runs `docker` from PATH: Debian's, as hack/kind.sh arranges.
export PATH=$cache/kind/bin:$PATH

mapfile -t images < <("$repo/hack/images.sh" --print)
operator_image=${images[1]}
tag=${operator_image##*:}
for img in "${images[@]}"; do
  docker image inspect "$img" >/dev/null 2>&1 || die "$img is missing: run make images (make e2e does)"
done

upgrade_tag=$tag-e2e-upgrade
upgrade_image=$IMAGE_PREFIX/shale-operator:$upgrade_tag
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
log "building $upgrade_image for the upgrade step"
CGO_ENABLED=0 go build -ldflags "-X github.com/shale-rocks/shale/internal/version.Version=$upgrade_tag" \
  -o "$ctx/shale-operator" "$repo/cmd/shale-operator"
printf 'FROM %s\nCOPY shale-operator /shale-operator\n' "$operator_image" >"$ctx/Dockerfile"
docker build -q -t "$upgrade_image" --label "org.opencontainers.image.revision=$tag" "$ctx" >/dev/null
"$kind" load docker-image --name "$cluster" "$upgrade_image" >/dev/null
# The same shale image under the upgrade tag: the upgrade-primaries step
# points the chart's operator.shaleImage at it, so every primary is
# outdated and rolls by switchover.
shale_upgrade_image=$IMAGE_PREFIX/shale:$upgrade_tag
docker tag "${images[0]}" "$shale_upgrade_image"
"$kind" load docker-image --name "$cluster" "$shale_upgrade_image" >/dev/null

start=$(date +%s)
rc=0
(
  cd "$repo/e2e"
  KUBECONFIG=$kubeconfig HELM=$helm KUBECTL=$kubectl DOCKER=$DOCKER KIND_CLUSTER=$cluster \
    IMAGE_PREFIX=$IMAGE_PREFIX E2E_IMAGE_TAG=$tag E2E_UPGRADE_TAG=$upgrade_tag \
    go test -tags e2e -count=1 -timeout "${E2E_TIMEOUT:-90m}" -v -run '^TestE2E$' .
) || rc=$?
log "suite took $(( $(date +%s) - start ))s"

if [ $rc -ne 0 ]; then
  log "FAILED; the cluster $cluster is kept: $(KIND_CLUSTER=$cluster "$repo/hack/kind.sh" env 2>/dev/null || true)"
  log "delete it with: make kind-down KIND_CLUSTER=$cluster"
  exit $rc
fi
if [ "${E2E_KEEP_CLUSTER:-0}" = 1 ]; then
  log "ok; keeping cluster $cluster (make kind-down KIND_CLUSTER=$cluster deletes it)"
else
  KIND_CLUSTER=$cluster "$repo/hack/kind.sh" down
  log "ok"
fi
