#!/usr/bin/env bash
# build-ovs.sh: build the ovs-vswitchd kovs ships and tests with: Debian 12's Open vSwitch
# (the openvswitch-source package, the same version as the openvswitch-switch package the
# kovs/ovs image and the test hosts install) with the patches in hack/ovs/, cached under
# $KOVS_CACHE (default $HOME/.cache/kovs) in ovs-<version>-<patches' digest>/bin, and
# linked as $KOVS_CACHE/ovs (what the Makefile puts first in PATH and kovs-images copies
# into the kovs/ovs image over the package's /usr/sbin/ovs-vswitchd). A second run takes
# a second.
#
# Why: OVS 3.1.0's userspace datapath applies a revalidator's modify of a megaflow to
# whichever overlapping megaflow a lookup by key finds first, so a connection can keep
# another flow's verdict (docs/upgrades.md, "Policy changes and traffic they do not
# concern"). Upstream fixed it in 3.1.3; Debian 12 carries 3.1.0 and nothing newer.
set -euo pipefail
CACHE=${KOVS_CACHE:-$HOME/.cache/kovs}
REPO=$(cd "$(dirname "$0")/.." && pwd)
PATCHES=("$REPO"/hack/ovs/*.patch)
SOURCE=/usr/src/openvswitch/openvswitch.tar.gz

version() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || true; }
src_version=$(version openvswitch-source)
switch_version=$(version openvswitch-switch)
if [ -z "$src_version" ] || [ ! -f "$SOURCE" ]; then
  echo "build-ovs: the openvswitch-source package is missing: run hack/install-deps.sh (make deps)" >&2
  exit 1
fi
if [ "$src_version" != "$switch_version" ]; then
  echo "build-ovs: openvswitch-source is $src_version but openvswitch-switch is ${switch_version:-not installed}: install the same version of both (apt-get install openvswitch-source=$switch_version)" >&2
  exit 1
fi
digest=$(cat "${PATCHES[@]}" "$0" | sha256sum | cut -c1-12)
OUT=$CACHE/ovs-$src_version-$digest
if [ ! -x "$OUT/bin/ovs-vswitchd" ]; then
  echo "building ovs-vswitchd $src_version with ${#PATCHES[@]} patch(es) from hack/ovs (about 2 minutes on 2 cores)"
  mkdir -p "$CACHE"
  work=$(mktemp -d "$CACHE/.ovs-build.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  tar xzf "$SOURCE" -C "$work"
  dir=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -1)
  for p in "${PATCHES[@]}"; do
    patch -d "$dir" -p1 --quiet --forward <"$p" || { echo "build-ovs: $p does not apply to openvswitch $src_version" >&2; exit 1; }
  done
  # Debian's paths, so that the binary runs in place of the package's.
  (cd "$dir" && ./configure --prefix=/usr --localstatedir=/var --sysconfdir=/etc --enable-ssl >"$work/configure.log" 2>&1) \
    || { tail -20 "$work/configure.log" >&2; exit 1; }
  # The version says the binary carries kovs's fix: `ovs-vswitchd --version` and ovs-appctl
  # version print 3.1.0+kovs<digest>, which the agent reads to choose its datapath
  # invalidation (--datapath-invalidation=auto: narrow only where a modify goes by UFID).
  upstream=$(sed -n 's/^#define PACKAGE_VERSION "\(.*\)"$/\1/p' "$dir/config.h")
  stamped="$upstream+kovs$digest"
  sed -i "s/\"$upstream\"/\"$stamped\"/; s/\"openvswitch $upstream\"/\"openvswitch $stamped\"/" "$dir/config.h"
  sed -i "s/\"$upstream\"/\"$stamped\"/" "$dir/include/openvswitch/version.h"
  grep -q "\"$stamped\"" "$dir/include/openvswitch/version.h" || { echo "build-ovs: could not stamp the version in include/openvswitch/version.h" >&2; exit 1; }
  (cd "$dir" && make -j"$(nproc)" >"$work/make.log" 2>&1) || { tail -30 "$work/make.log" >&2; exit 1; }
  mkdir -p "$work/out/bin"
  install -m 0755 "$dir/vswitchd/ovs-vswitchd" "$work/out/bin/ovs-vswitchd"
  rm -rf "$OUT"
  mv "$work/out" "$OUT"
fi
ln -sfn "$(basename "$OUT")" "$CACHE/ovs"
echo "ovs-vswitchd: $OUT/bin/ovs-vswitchd ($("$OUT/bin/ovs-vswitchd" --version | head -1); patches: $(basename -a "${PATCHES[@]}" | tr '\n' ' '))"
