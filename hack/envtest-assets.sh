#!/usr/bin/env bash
# Lays out kube-apiserver, etcd and kubectl where controller-runtime's envtest
# finds them (KUBEBUILDER_ASSETS), from the cache hack/k8s-binaries.sh fills.
# Only those three are built, so `make test` never waits for the rest.
#
#   hack/envtest-assets.sh           build what is missing, lay them out
#   hack/envtest-assets.sh --print   print the directory (for KUBEBUILDER_ASSETS)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

dir=$(envtest_dir)
if [ "${1:-}" = --print ]; then
  echo "$dir"
  exit 0
fi

"$repo/hack/k8s-binaries.sh" kube-apiserver etcd kubectl
mkdir -p "$dir"
for b in kube-apiserver etcd kubectl; do
  src=$("$repo/hack/k8s-binaries.sh" --print "$b")
  if ! [ "$dir/$b" -ef "$src" ]; then
    ln -f "$src" "$dir/$b.tmp" 2>/dev/null || cp "$src" "$dir/$b.tmp"
    mv -f "$dir/$b.tmp" "$dir/$b"
  fi
done
log "ok: KUBEBUILDER_ASSETS=$dir"
