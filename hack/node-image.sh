#!/usr/bin/env bash
# Assembles a kind node image by hand, with no container registry: `kind
# build node-image` cannot work offline (it pulls etcd, CoreDNS, pause and
# kindnetd, and calls `ctr info`, which Debian's ctr 1.6 lacks).
#
#   hack/node-image.sh         build the node image unless it already exists
#   hack/node-image.sh --tag   print the tag its current inputs hash to
#   hack/node-image.sh --base  build only the base (Debian rootfs + kind files)
#
# Three layers of work, each reused when its inputs have not changed:
#  1. base: a Debian rootfs from debootstrap (systemd, containerd, runc, CNI
#     plugins, iptables...) plus kind's own node files from the kind module
#     (images/base/files), imported into Docker.
#  2. control-plane images, FROM scratch around the static binaries built by
#     hack/k8s-binaries.sh, tagged exactly as kubeadm expects
#     (registry.k8s.io/...), plus a small pause; kube-proxy, which needs
#     iptables and conntrack, sits on the base rootfs.
#  3. node: base + kubeadm/kubelet/kubectl/crictl + the images above preloaded
#     into the node's containerd, committed as
#     $IMAGE_PREFIX/kind-node:<k8s version>-<hash of the inputs>.
# kindnetd is not available offline: the node carries a static ptp CNI config
# for the pod subnet 10.244.0.0/16 (one node gets 10.244.0.0/24), and kind is
# told to install no CNI (hack/kind.sh).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

pod_cidr=10.244.0.0/24
base_pkgs=systemd,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,fuse-overlayfs,bash,ca-certificates,curl,jq,procps,containerd,runc,containernetworking-plugins

kind_files() {
  local dir
  dir=$(cd "$cache" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" |
    sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -d "$dir/images/base/files" ] || die "kind $KIND_VERSION sources not found in the Go module cache"
  printf '%s/images/base/files' "$dir"
}

# The mirror this machine's apt uses for Debian itself.
debian_mirror() {
  if [ -n "${NODE_DEBIAN_MIRROR:-}" ]; then echo "$NODE_DEBIAN_MIRROR"; return; fi
  local m
  m=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {for (i=2;i<=NF;i++) print $i}' | grep -v security | grep '/debian/\?$' | head -n1 || true)
  [ -n "$m" ] || m=$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}' | grep -v security | grep '/debian/\?$' | head -n1 || true)
  echo "${m:-http://deb.debian.org/debian}"
}

short_hash() { sha256sum | cut -c1-12; }

# --- 1. base ------------------------------------------------------------------
# customize_rootfs ROOT: turns a debootstrapped Debian into kind's base, the
# way kind's images/base/Dockerfile does, with Debian's containerd and runc.
customize_rootfs() {
  local root=$1 files
  files=$(kind_files)
  install -d -m 0755 "$root/kind" "$root/kind/bin" "$root/etc/containerd" "$root/etc/default" \
    "$root/etc/sysctl.d" "$root/etc/systemd/system/kubelet.service.d" "$root/opt/cni/bin" \
    "$root/etc/cni/net.d" "$root/etc/kubernetes/manifests" "$root/usr/local/bin"
  install -m 0755 "$files"/usr/local/bin/* "$root/usr/local/bin/"
  install -m 0644 "$files"/kind/README.txt "$root/kind/"
  install -m 0755 "$files"/kind/bin/* "$root/kind/bin/"
  install -m 0644 "$files"/etc/crictl.yaml "$root/etc/"
  install -m 0644 "$files"/etc/containerd/* "$root/etc/containerd/"
  install -m 0644 "$files"/etc/default/* "$root/etc/default/"
  install -m 0644 "$files"/etc/sysctl.d/* "$root/etc/sysctl.d/"
  local f
  for f in "$files"/etc/systemd/system/*; do
    if [ -f "$f" ]; then install -m 0644 "$f" "$root/etc/systemd/system/"; fi
  done
  install -m 0644 "$files"/etc/systemd/system/kubelet.service.d/* "$root/etc/systemd/system/kubelet.service.d/"

  # Kind's containerd unit and scripts look in /usr/local/bin; Debian installs
  # into /usr/bin.
  local b
  for b in containerd ctr containerd-shim-runc-v2 containerd-shim containerd-shim-runc-v1; do
    [ -e "$root/usr/bin/$b" ] && ln -sfn "/usr/bin/$b" "$root/usr/local/bin/$b"
  done
  cp -a "$root"/usr/lib/cni/. "$root/opt/cni/bin/"

  # The pause container's oom_score_adj would need CAP_SYS_RESOURCE, which
  # hosts like ours lack (pod sandboxes then fail with "can't get final
  # child's PID from pipe: EOF"). Restricting it is harmless elsewhere.
  sed -i 's/^\(\s*restrict_oom_score_adj\s*=\s*\).*/\1true/' "$root/etc/containerd/config.toml"
  grep -q 'restrict_oom_score_adj = true' "$root/etc/containerd/config.toml" ||
    die "kind's containerd config no longer has restrict_oom_score_adj"

  # Static CNI: ptp veths (routed, like kindnet) with host-local IPAM.
  cat >"$root/etc/cni/net.d/10-shale-ptp.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "shale-pods",
  "plugins": [
    {
      "type": "ptp",
      "ipMasq": true,
      "mtu": 1500,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$pod_cidr" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
EOF

  # systemd as PID 1 in a container, as kind's base does it.
  find "$root/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
  rm -f "$root"/lib/systemd/system/multi-user.target.wants/* \
    "$root"/etc/systemd/system/*.wants/* \
    "$root"/lib/systemd/system/local-fs.target.wants/* \
    "$root"/lib/systemd/system/sockets.target.wants/*udev* \
    "$root"/lib/systemd/system/sockets.target.wants/*initctl* \
    "$root"/lib/systemd/system/basic.target.wants/*
  echo "ReadKMsg=no" >>"$root/etc/systemd/journald.conf"
  ln -sfn /lib/systemd/systemd "$root/sbin/init"
  chroot "$root" systemctl enable kubelet.service containerd.service undo-mount-hacks.service
  chroot "$root" systemctl mask systemd-binfmt.service

  # containerd's base OCI spec, with kind's product-files hook and no rlimits.
  chroot "$root" ctr oci spec |
    chroot "$root" jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' |
    chroot "$root" jq 'del(.process.rlimits)' >"$root/etc/containerd/cri-base.json"
  [ -s "$root/etc/containerd/cri-base.json" ] || die "could not generate cri-base.json"

  # Smaller image: no docs, no apt lists.
  rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/var/lib/apt/lists/* \
    "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
}

base_hash() {
  { echo "$NODE_DEBIAN_SUITE $KIND_VERSION $base_pkgs $pod_cidr"; declare -f customize_rootfs build_base; } | short_hash
}

base_image() { printf '%s/kind-base:%s-%s' "$IMAGE_PREFIX" "$NODE_DEBIAN_SUITE" "$(base_hash)"; }

# debootstrap_tar: the plain debootstrapped rootfs, cached as a tarball keyed
# by suite and package list (so changing the customization above does not
# download Debian again).
debootstrap_tar() {
  local tar root mirror
  tar=$cache/node/debootstrap-$NODE_DEBIAN_SUITE-$(echo "$base_pkgs" | short_hash).tar
  if [ ! -s "$tar" ]; then
    apt_install debootstrap debian-archive-keyring >&2
    mirror=$(debian_mirror)
    mkdir -p "$cache/node"
    root=$(mktemp -d "$cache/node/debootstrap.XXXXXX")
    log "debootstrap $NODE_DEBIAN_SUITE from $mirror (about 2 minutes)"
    if ! nicely debootstrap --variant=minbase --include="$base_pkgs" \
      --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
      "$NODE_DEBIAN_SUITE" "$root" "$mirror" >"$cache/logs/debootstrap.log" 2>&1; then
      umount -R "$root/proc" "$root/sys" 2>/dev/null || true
      rm -rf "$root"
      die "debootstrap failed; see $cache/logs/debootstrap.log"
    fi
    rm -rf "$root"/var/cache/apt/archives/*.deb
    tar -C "$root" --numeric-owner -cf "$tar.tmp" .
    mv "$tar.tmp" "$tar"
    rm -rf "$root"
  fi
  printf '%s' "$tar"
}

build_base() {
  local img rootfs_img root tar
  img=$(base_image)
  rootfs_img=${img/kind-base:/kind-base-rootfs:}
  if docker image inspect "$img" >/dev/null 2>&1; then return; fi
  tar=$(debootstrap_tar)
  root=$(mktemp -d "$cache/node/rootfs.XXXXXX")
  # shellcheck disable=SC2064
  trap "rm -rf '$root'" EXIT
  tar -C "$root" --numeric-owner -xf "$tar"
  customize_rootfs "$root"
  log "importing the base rootfs as $rootfs_img"
  tar -C "$root" --numeric-owner -c . | docker import - "$rootfs_img" >/dev/null
  rm -rf "$root"
  trap - EXIT
  # Docker 20.10's import rejects STOPSIGNAL: set the runtime config in a build.
  local ctx
  ctx=$(mktemp -d)
  cat >"$ctx/Dockerfile" <<EOF
FROM $rootfs_img
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
EOF
  docker build -q -t "$img" "$ctx" >/dev/null
  rm -rf "$ctx"
}

# --- 2. control-plane images ----------------------------------------------------
# scratch_image TAG BINARY NAME: FROM scratch with BINARY at /usr/local/bin/NAME.
scratch_image() {
  local tag=$1 bin=$2 name=$3 ctx entry
  entry=${4:-/usr/local/bin/$name}
  ctx=$(mktemp -d)
  mkdir -p "$ctx/root/usr/local/bin" "$ctx/root/tmp" "$ctx/root/etc"
  cp "$bin" "$ctx/root/usr/local/bin/$name"
  [ "$entry" = "/usr/local/bin/$name" ] || ln -s "usr/local/bin/$name" "$ctx/root/$(basename "$entry")"
  chmod 1777 "$ctx/root/tmp"
  echo 'root:x:0:0:root:/:/nonexistent' >"$ctx/root/etc/passwd"
  echo 'hosts: files dns' >"$ctx/root/etc/nsswitch.conf"
  cat >"$ctx/Dockerfile" <<EOF
FROM scratch
COPY root/ /
ENV PATH=/usr/local/bin:/usr/bin:/bin
ENTRYPOINT ["$entry"]
EOF
  docker build -q -t "$tag" "$ctx" >/dev/null
  rm -rf "$ctx"
}

# control_plane_images: builds them and prints their tags.
control_plane_images() {
  local kbin list ref name pause_bin ctx
  kbin=$(k8s_bin_dir)
  list=$("$kbin/kubeadm" config images list --kubernetes-version "$KUBERNETES_VERSION" 2>/dev/null) ||
    die "kubeadm config images list failed"
  pause_bin=$cache/pause/$PAUSE_VERSION-$(short_hash <"$repo/hack/pause/main.go")/pause
  if [ ! -x "$pause_bin" ]; then
    mkdir -p "$(dirname "$pause_bin")"
    (cd "$repo" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$PAUSE_VERSION" -o "$pause_bin" ./hack/pause)
  fi
  for ref in $list; do
    name=${ref%:*}
    name=${name##*/}
    case $name in
      kube-apiserver|kube-controller-manager|kube-scheduler) scratch_image "$ref" "$kbin/$name" "$name" ;;
      etcd)
        [ "${ref##*:}" = "${ETCD_VERSION#v}-0" ] || log "note: kubeadm names $ref; serving etcd $ETCD_VERSION under that tag"
        scratch_image "$ref" "$(etcd_bin)" etcd ;;
      coredns)
        [ "${ref##*:}" = "$COREDNS_VERSION" ] || log "note: kubeadm names $ref; serving CoreDNS $COREDNS_VERSION under that tag"
        scratch_image "$ref" "$(coredns_bin)" coredns /coredns ;;
      pause)
        [ "${ref##*:}" = "$PAUSE_VERSION" ] || die "kubeadm wants $ref but PAUSE_VERSION is $PAUSE_VERSION"
        scratch_image "$ref" "$pause_bin" pause /pause
        # kind's containerd config names pause:3.10 as the sandbox image.
        docker tag "$ref" "${ref%:*}:3.10"
        echo "${ref%:*}:3.10" ;;
      kube-proxy)
        ctx=$(mktemp -d)
        cp "$kbin/kube-proxy" "$ctx/"
        printf 'FROM %s\nCOPY kube-proxy /usr/local/bin/kube-proxy\nENTRYPOINT ["/usr/local/bin/kube-proxy"]\n' \
          "$(base_image | sed 's/kind-base:/kind-base-rootfs:/')" >"$ctx/Dockerfile"
        docker build -q -t "$ref" "$ctx" >/dev/null
        rm -rf "$ctx" ;;
      *) die "kubeadm wants an image this script does not build: $ref" ;;
    esac
    echo "$ref"
  done
}

# --- 3. node ------------------------------------------------------------------
inputs_hash() {
  {
    grep -E '^(KUBERNETES|ETCD|COREDNS|CRICTL|KIND|PAUSE|NODE)_' "$repo/hack/versions.env"
    cat "$repo/hack/node-image.sh" "$repo/hack/k8s-binaries.sh" "$repo/hack/pause/main.go"
  } | short_hash
}

node_tag() { printf '%s/kind-node:%s-%s' "$IMAGE_PREFIX" "$KUBERNETES_VERSION" "$(inputs_hash)"; }

case ${1:-} in
  --tag) node_tag; echo; exit 0 ;;
  --base) "$repo/hack/docker.sh"; timed "base image $(base_image)" build_base; exit 0 ;;
  "") ;;
  *) die "usage: $0 [--tag|--base]" ;;
esac

tag=$(node_tag)
if docker image inspect "$tag" >/dev/null 2>&1; then
  log "ok: $tag is up to date"
  exit 0
fi

"$repo/hack/docker.sh"
# The base (mostly downloads and dpkg) builds while Go compiles.
timed "base image $(base_image)" build_base &
base_job=$!
# shellcheck disable=SC2064
trap "kill $base_job 2>/dev/null || true" EXIT
"$repo/hack/k8s-binaries.sh" kubelet kubeadm kubectl kube-apiserver \
  kube-controller-manager kube-scheduler kube-proxy etcd coredns crictl
wait "$base_job" || die "building the base image failed"
mapfile -t images < <(control_plane_images)
log "control-plane images: ${images[*]}"

kbin=$(k8s_bin_dir)
cid=$(docker run -d --entrypoint=sleep "$(base_image)" infinity)
# shellcheck disable=SC2064
trap "docker rm -f $cid >/dev/null 2>&1 || true" EXIT
for b in kubeadm kubelet kubectl; do docker cp "$kbin/$b" "$cid:/usr/bin/$b"; done
docker cp "$(crictl_bin)" "$cid:/usr/local/bin/crictl"
echo "$KUBERNETES_VERSION" | docker exec -i "$cid" sh -c 'cat >/kind/version'

# containerd runs unprivileged here: enough for its content store, which is
# all `ctr images import --no-unpack` needs; CRI unpacks on first use.
docker exec -d "$cid" sh -c 'containerd >/var/log/containerd-preload.log 2>&1'
for _ in $(seq 1 30); do
  docker exec "$cid" ctr version >/dev/null 2>&1 && break
  sleep 1
done
log "preloading ${#images[@]} images into the node's containerd"
docker save "${images[@]}" | docker exec -i "$cid" ctr -n k8s.io images import \
  --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack --digests - >/dev/null
loaded=$(docker exec "$cid" ctr -n k8s.io images ls -q)
for img in "${images[@]}"; do
  grep -qx "$img" <<<"$loaded" || die "$img is missing from the node's containerd after import"
done
docker exec "$cid" sh -c 'pkill -x containerd; while pgrep -x containerd >/dev/null; do sleep 0.2; done; rm -f /var/log/containerd-preload.log'
docker commit \
  --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
  --change 'CMD []' \
  "$cid" "$tag" >/dev/null
log "ok: built $tag"

# Older node and base images (other input hashes) are dead weight of 1-2 GB
# each; remove those no container uses.
for old in $(docker images --format '{{.Repository}}:{{.Tag}}' | grep -E "^$IMAGE_PREFIX/kind-(node|base|base-rootfs):" || true); do
  case $old in "$tag"|"$(base_image)"|"$(base_image | sed 's/kind-base:/kind-base-rootfs:/')") continue ;; esac
  docker rmi "$old" >/dev/null 2>&1 && log "removed the outdated $old" || true
done
