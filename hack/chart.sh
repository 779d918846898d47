#!/usr/bin/env bash
# The Helm chart charts/shale: keeps its copies of the generated CRDs and
# RBAC rules in sync, and checks it with helm (built from its Go module,
# pinned, cached; see hack/k8s-binaries.sh).
#
#   hack/chart.sh sync    copy config/crd/bases/*.yaml to charts/shale/files/crds/
#                         and config/rbac/role.yaml to charts/shale/files/rbac/
#   hack/chart.sh lint    check the copies are current, `helm lint --strict` and
#                         `helm template` with every values file in
#                         charts/shale/ci/ (values checked against
#                         values.schema.json), with and without the
#                         Prometheus Operator API, and check that bad values
#                         are refused by the schema
#   hack/chart.sh helm    print the path of the helm binary (building it if needed)
#
# The Go test in charts/ (part of make test) applies the rendered chart to a
# real kube-apiserver.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

chart=$repo/charts/shale
crd_src=$repo/config/crd/bases
rbac_src=$repo/config/rbac/role.yaml

helm_path() {
  local h
  h=$(helm_bin)
  if ! [ -x "$h" ]; then
    if pgrep -f 'hack/k8s-binaries.sh' >/dev/null; then
      die "helm is not built yet and hack/k8s-binaries.sh is running (it has no lock): wait for it, then run make helm"
    fi
    "$repo/hack/k8s-binaries.sh" helm >&2
  fi
  printf '%s' "$h"
}

sync() {
  [ -d "$crd_src" ] || die "$crd_src is missing: the operator's CRDs are generated there (make generate)"
  rm -rf "$chart/files/crds"
  mkdir -p "$chart/files/crds" "$chart/files/rbac"
  cp "$crd_src"/*.yaml "$chart/files/crds/"
  if [ -f "$rbac_src" ]; then
    cp "$rbac_src" "$chart/files/rbac/role.yaml"
  else
    die "$rbac_src is missing: the operator's RBAC rules are generated there (make generate)"
  fi
  log "ok: copied $(ls "$crd_src" | wc -l) CRDs and the RBAC rules into $chart/files"
}

# check_sync: the chart ships exactly what controller-gen generated.
check_sync() {
  local stale=0
  if ! diff -r "$crd_src" "$chart/files/crds" >/dev/null 2>&1; then
    diff -r "$crd_src" "$chart/files/crds" >&2 || true
    stale=1
  fi
  if ! cmp -s "$rbac_src" "$chart/files/rbac/role.yaml"; then
    diff "$rbac_src" "$chart/files/rbac/role.yaml" >&2 || true
    stale=1
  fi
  [ $stale = 0 ] || die "charts/shale/files is stale: run hack/chart.sh sync (or make generate) and commit"
}

lint() {
  local helm out tmp f n=0
  helm=$(helm_path)
  # helm built with go install assumes Kubernetes v1.20 unless told; the
  # chart wants what the clusters here run.
  check_sync
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN

  "$helm" lint --strict --kube-version "$KUBERNETES_VERSION" "$chart" >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; die "helm lint failed with the default values"; }
  for f in "$chart"/ci/*-values.yaml; do
    "$helm" lint --strict --kube-version "$KUBERNETES_VERSION" "$chart" -f "$f" >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; die "helm lint failed with $(basename "$f")"; }
    # With and without the Prometheus Operator's API.
    "$helm" template lint-check "$chart" --kube-version "$KUBERNETES_VERSION" -n shale-system -f "$f" >"$tmp/plain.yaml" 2>"$tmp/err" ||
      { cat "$tmp/err" >&2; die "helm template failed with $(basename "$f")"; }
    "$helm" template lint-check "$chart" --kube-version "$KUBERNETES_VERSION" -n shale-system -f "$f" --api-versions monitoring.coreos.com/v1 >"$tmp/prom.yaml" 2>"$tmp/err" ||
      { cat "$tmp/err" >&2; die "helm template --api-versions monitoring.coreos.com/v1 failed with $(basename "$f")"; }
    if grep -q '^kind: \(ServiceMonitor\|PodMonitor\)$' "$tmp/plain.yaml"; then
      die "$(basename "$f"): a ServiceMonitor or PodMonitor was rendered for a cluster without monitoring.coreos.com/v1"
    fi
    n=$((n + 1))
  done
  [ $n -gt 0 ] || die "no values files in $chart/ci/"

  # The schema is in force: each of these must be refused, naming the value.
  local bad=(
    "operator.replicas=-1"
    "operator.image.pullPolicy=Sometimes"
    "operator.failoverGrace=soon"
    "operator.gc.grace=1 day"
    "operator.compactorPollInterval=often"
    "demo.minio.buckets.hot=Not_A_Bucket"
    "metrics.port=80"
    "operator.logLevel=chatty"
    "networkPolicy.enabled=maybe"
    "networkPolicy.metricsNamespaceSelector.matchLabel.team=obs"
    "watchNamespaces={Team_A}"
    "watchNamespaces={a,a}"
    "notAValue=1"
  )
  local b
  for b in "${bad[@]}"; do
    if "$helm" template lint-check "$chart" --kube-version "$KUBERNETES_VERSION" --set "$b" >/dev/null 2>"$tmp/err"; then
      die "helm template accepted the bad value $b: values.schema.json does not check it"
    fi
    grep -q 'values don.t meet the specifications of the schema' "$tmp/err" ||
      { cat "$tmp/err" >&2; die "$b was refused, but not by the schema"; }
  done
  # And the template's own refusals.
  if "$helm" template lint-check "$chart" --kube-version "$KUBERNETES_VERSION" --set operator.replicas=2 --set operator.leaderElection=false >/dev/null 2>"$tmp/err"; then
    die "two operators without leader election were accepted"
  fi
  if "$helm" template lint-check "$chart" --kube-version "$KUBERNETES_VERSION" --set demo.minio.enabled=true --set demo.minio.buckets.cold=shale >/dev/null 2>"$tmp/err"; then
    die "the same bucket for hot and cold was accepted"
  fi
  log "ok: chart in sync with config/, helm lint and helm template pass with $n values files, ${#bad[@]} bad values refused by the schema"
}

case ${1:-} in
  sync) sync ;;
  lint) lint ;;
  helm) helm_path; echo ;;
  *) die "usage: $0 sync|lint|helm" ;;
esac
