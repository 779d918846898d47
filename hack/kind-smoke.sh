#!/usr/bin/env bash
# Smoke test of the offline Kubernetes chain: creates the kind cluster
# $KIND_CLUSTER, loads Shale's images, and checks that
#   1. a pod of the shale image runs `shale --version` (RocksDB $ROCKSDB_VERSION inside, linked statically),
#   2. a pod of the minio image serves behind a Service that another pod
#      reaches by its cluster DNS name,
# then deletes the cluster (KEEP_CLUSTER=1 keeps it for a look).
#
# It refuses to run on an existing cluster of that name rather than delete
# someone's work. Expects `make kind-node-image images` (the Makefile target
# does that first).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

cluster=${KIND_CLUSTER:-shale}
ns=shale-smoke
start=$(date +%s)
kubectl() { "$(k8s_bin_dir)/kubectl" "$@"; }
export KUBECONFIG=$cache/kind/$cluster/kubeconfig

if "$(kind_bin)" get clusters 2>/dev/null | grep -qx "$cluster"; then
  die "cluster $cluster already exists; delete it (make kind-down) or set KIND_CLUSTER to another name"
fi

cleanup() {
  local rc=$?
  if [ $rc -ne 0 ] && [ -f "$KUBECONFIG" ]; then
    log "FAILED; state of the cluster:"
    kubectl get pods -A -o wide >&2 || true
    kubectl -n "$ns" describe pods >&2 || true
    kubectl -n "$ns" logs --all-containers --prefix -l app --tail=30 >&2 || true
  fi
  if [ "${KEEP_CLUSTER:-0}" = 1 ]; then
    log "keeping cluster $cluster: $("$repo/hack/kind.sh" env)"
  else
    "$repo/hack/kind.sh" down || true
  fi
  exit $rc
}
trap cleanup EXIT

"$repo/hack/kind.sh" up
"$repo/hack/kind.sh" load
t_up=$(date +%s)

mapfile -t images < <("$repo/hack/images.sh" --print)
shale_img=${images[0]}
minio_img=${images[2]}
# The client pod needs a shell and curl; the node's kube-proxy image (a
# Debian userland, preloaded) has both.
curl_img=$(kubectl -n kube-system get ds kube-proxy -o jsonpath='{.spec.template.spec.containers[0].image}')

# Throwaway credentials, made up for this run only.
minio_user=smoke$RANDOM
minio_password=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')

kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $ns
---
apiVersion: v1
kind: Pod
metadata:
  name: shale-version
  namespace: $ns
  labels: {app: shale-version}
spec:
  restartPolicy: Never
  securityContext: {runAsNonRoot: true}
  containers:
    - name: shale
      image: $shale_img
      imagePullPolicy: Never
      args: ["--version"]
      securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
---
apiVersion: v1
kind: Secret
metadata:
  name: minio
  namespace: $ns
stringData:
  MINIO_ROOT_USER: $minio_user
  MINIO_ROOT_PASSWORD: $minio_password
---
apiVersion: v1
kind: Pod
metadata:
  name: minio
  namespace: $ns
  labels: {app: minio}
spec:
  securityContext: {runAsNonRoot: true}
  containers:
    - name: minio
      image: $minio_img
      imagePullPolicy: Never
      args: ["server", "/data", "--address", ":9000"]
      envFrom: [{secretRef: {name: minio}}]
      ports: [{containerPort: 9000, name: s3}]
      readinessProbe:
        httpGet: {path: /minio/health/ready, port: s3}
        periodSeconds: 2
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
      volumeMounts: [{name: data, mountPath: /data}]
  volumes: [{name: data, emptyDir: {}}]
---
apiVersion: v1
kind: Service
metadata:
  name: minio
  namespace: $ns
spec:
  selector: {app: minio}
  ports: [{name: s3, port: 9000, targetPort: s3}]
EOF

log "waiting for shale --version"
kubectl -n "$ns" wait pod/shale-version --for=jsonpath='{.status.phase}'=Succeeded --timeout=120s >/dev/null
out=$(kubectl -n "$ns" logs shale-version)
case $out in
  *"RocksDB $ROCKSDB_VERSION"*) log "shale pod: $out" ;;
  *) die "shale pod printed '$out', expected RocksDB $ROCKSDB_VERSION" ;;
esac

log "waiting for minio to be ready"
kubectl -n "$ns" wait pod/minio --for=condition=Ready --timeout=120s >/dev/null

# From another pod, through cluster DNS and the Service's virtual IP: the
# health endpoint, then an unauthenticated S3 call that must be refused by
# MinIO itself (proves it is MinIO answering, not just an open port).
kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: client
  namespace: $ns
  labels: {app: client}
spec:
  restartPolicy: Never
  containers:
    - name: client
      image: $curl_img
      imagePullPolicy: Never
      command:
        - sh
        - -c
        - |
          set -e
          url=http://minio.$ns.svc.cluster.local:9000
          curl -fsS --retry 10 --retry-delay 1 --retry-connrefused -o /dev/null -w 'live %{http_code}\n' \$url/minio/health/live
          code=\$(curl -sS -o /tmp/body -w '%{http_code}' \$url/)
          echo "anonymous list: \$code"
          grep -q AccessDenied /tmp/body
EOF
kubectl -n "$ns" wait pod/client --for=jsonpath='{.status.phase}'=Succeeded --timeout=120s >/dev/null ||
  { kubectl -n "$ns" logs client >&2 || true; die "the client pod could not reach minio through its Service"; }
log "client pod: $(kubectl -n "$ns" logs client | tr '\n' ' ')"

end=$(date +%s)
log "ok: kind-smoke passed in $((end - start))s (cluster up and images loaded in $((t_up - start))s)"
