#!/usr/bin/env bash
# check-goldens.sh: load every golden flow file into a real, throwaway Open vSwitch and
# check that (1) ovs-vswitchd accepts it as one OpenFlow 1.5 bundle and (2) dump-flows
# prints back exactly the lines of the file, i.e. the pipeline package renders flows in
# OVS's own canonical syntax.
#
# Needs root (it runs ovsdb-server and ovs-vswitchd in a private network namespace made
# with `unshare -n`, so no device appears on the host) and openvswitch-switch (3.1).
# Everything lives in a fresh mktemp directory; only the PIDs from its own pidfiles are
# killed on exit.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
run=$(mktemp -d "${TMPDIR:-/tmp}/kovs-check-goldens.XXXXXX")
export OVS_RUNDIR=$run OVS_LOGDIR=$run OVS_DBDIR=$run
OF=(ovs-ofctl -O OpenFlow15)

stop() { # kill our daemons (pidfile + matching cmdline only), then remove the directory
  local f p
  for f in "$run/ovs-vswitchd.pid" "$run/ovsdb-server.pid"; do
    [ -f "$f" ] || continue
    p=$(cat "$f")
    if tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -qF -- "$run/"; then
      kill "$p" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    fi
  done
  rm -rf "$run"
}
trap stop EXIT

[ "$(id -u)" = 0 ] || { echo "check-goldens: needs root (unshare -n, ovs-vswitchd)" >&2; exit 2; }
ovsdb-tool create "$run/conf.db" /usr/share/openvswitch/vswitch.ovsschema
unshare -n bash -c "
  ovsdb-server $run/conf.db --remote=punix:$run/db.sock --pidfile=$run/ovsdb-server.pid \
    --unixctl=$run/ovsdb-server.ctl --log-file=$run/ovsdb-server.log --detach --no-chdir -vconsole:off
  ovs-vsctl --db=unix:$run/db.sock --no-wait init
  ovs-vswitchd unix:$run/db.sock --pidfile=$run/ovs-vswitchd.pid --unixctl=$run/ovs-vswitchd.ctl \
    --log-file=$run/ovs-vswitchd.log --detach --no-chdir -vconsole:off
" 2>"$run/start.err" || { cat "$run/start.err" >&2; exit 2; }
ovs-vsctl --timeout=30 --db="unix:$run/db.sock" add-br br-int -- set bridge br-int \
  datapath_type=netdev fail-mode=secure protocols=OpenFlow13,OpenFlow14,OpenFlow15
bridge="unix:$run/br-int.mgmt"

fails=0
for golden in "$here"/golden/*.flows; do
  name=$(basename "$golden")
  "${OF[@]}" del-flows "$bridge"
  if ! "${OF[@]}" --bundle add-flows "$bridge" "$golden"; then
    echo "FAIL $name: ovs-vswitchd refused the bundle"; fails=$((fails + 1)); continue
  fi
  want=$(grep -v -e '^#' -e '^$' "$golden" | LC_ALL=C sort)
  got=$("${OF[@]}" dump-flows --no-stats "$bridge" | sed 's/^ //' | LC_ALL=C sort)
  if [ "$want" != "$got" ]; then
    echo "FAIL $name: dump-flows differs from the golden file (< golden, > OVS):"
    diff <(echo "$want") <(echo "$got") || true
    fails=$((fails + 1)); continue
  fi
  echo "ok   $name: $(echo "$got" | wc -l) flows accepted, dump-flows identical"
done
# Bundle goldens (groups and flows, as the agent installs them in one bundle).
for golden in "$here"/golden/*.bundle; do
  [ -e "$golden" ] || continue
  name=$(basename "$golden")
  "${OF[@]}" del-flows "$bridge"; "${OF[@]}" del-groups "$bridge"
  if ! "${OF[@]}" bundle "$bridge" "$golden"; then
    echo "FAIL $name: ovs-vswitchd refused the bundle"; fails=$((fails + 1)); continue
  fi
  want=$(sed -n 's/^flow add //p' "$golden" | LC_ALL=C sort)
  got=$("${OF[@]}" dump-flows --no-stats "$bridge" | sed 's/^ //' | LC_ALL=C sort)
  wantg=$(sed -n 's/^group add //p' "$golden" | LC_ALL=C sort)
  gotg=$("${OF[@]}" dump-groups "$bridge" | grep group_id= | sed 's/^ //' | LC_ALL=C sort)
  if [ "$want" != "$got" ] || [ "$wantg" != "$gotg" ]; then
    echo "FAIL $name: dump-flows/dump-groups differ from the golden file (< golden, > OVS):"
    diff <(echo "$want"; echo "$wantg") <(echo "$got"; echo "$gotg") || true
    fails=$((fails + 1)); continue
  fi
  echo "ok   $name: $(echo "$got" | wc -l) flows and $(echo "$gotg" | wc -l) groups accepted, dumps identical"
done
exit $fails
