#!/usr/bin/env bash
# install-deps.sh: install the Debian packages kovs builds, tests and runs its sandbox with
# (and builds its images with: mmdebstrap for the root filesystems, gcc for pause).
# Idempotent: installs only what is missing, and runs `apt-get update` at most once.
set -euo pipefail

# command -> Debian package that provides it
declare -A need=(
  [ovs-vswitchd]=openvswitch-switch
  [ovsdb-tool]=openvswitch-common
  [etcd]=etcd-server
  [ip]=iproute2
  [ethtool]=ethtool
  [jq]=jq
  [nsenter]=util-linux
  [conntrack]=conntrack
  [nft]=nftables
  [ping]=iputils-ping
  [mmdebstrap]=mmdebstrap
  [gcc]=gcc
  # hack/build-ovs.sh: the ovs-vswitchd kovs ships, built from Debian's source.
  [make]=make
  [patch]=patch
  [python3]=python3
  # Real nodes of the sandbox (kovs-sandbox up --runtime containerd).
  [containerd]=containerd
  [ctr]=containerd
  [runc]=runc
)
missing=()
for cmd in "${!need[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${need[$cmd]}")
done
# The C library's headers and static archive: hack/build-k8s.sh compiles the pause image's
# binary static.
[ -e /usr/include/stdio.h ] || missing+=(libc6-dev)
# hack/build-ovs.sh: Open vSwitch's source, as Debian ships it, and OpenSSL's headers.
[ -e /usr/src/openvswitch/openvswitch.tar.gz ] || missing+=(openvswitch-source)
[ -e /usr/include/openssl/ssl.h ] || missing+=(libssl-dev)
# The reference CNI plugins a real node's OS ships in /opt/cni/bin (loopback, portmap, ...).
[ -e /usr/lib/cni/loopback ] || missing+=(containernetworking-plugins)
if [ ${#missing[@]} -eq 0 ]; then
  echo "Debian packages: all present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing ${missing[*]}; run as root (apt-get install)" >&2
  exit 1
fi
echo "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The packages' own services are not used: every sandbox node runs its own OVS and the
# sandbox runs its own etcd. Stop them if the package started them.
for svc in openvswitch-switch etcd containerd; do
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
    systemctl stop "$svc" || true
  fi
done
echo "Debian packages installed"
