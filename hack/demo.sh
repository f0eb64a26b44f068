#!/usr/bin/env bash
# demo.sh: a 3-node kovs sandbox, pods in two namespaces on different nodes, the
# pod-to-pod connectivity matrix with the source address each receiver saw, and an
# ofproto/trace of one cross-node packet. Tears the sandbox down at the end unless
# KEEP=1 (then: `make sandbox-down SANDBOX=demo`).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/_output/bin
NAME=${SANDBOX:-demo}
FAMILY=${IP_FAMILY:-ipv4}
K8S_BIN=${KOVS_K8S_BIN_DIR:-${KOVS_CACHE:-$HOME/.cache/kovs}/k8s-v1.37.2/bin}
export KOVS_K8S_BIN_DIR=$K8S_BIN
sbx() { "$BIN/kovs-sandbox" --name "$NAME" "$@"; }
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

if [ "${KEEP:-0}" != 1 ]; then trap 'step "tear down"; sbx down >/dev/null && echo "sandbox $NAME removed"' EXIT; fi
sbx down >/dev/null 2>&1 || true

step "start a 3-node sandbox ($FAMILY): etcd, kube-apiserver, controller-manager, scheduler, 3 nodes with OVS, kovs"
sbx up --nodes 3 --ip-family "$FAMILY"
export KUBECONFIG=$(sbx kubeconfig)
KUBECTL="$K8S_BIN/kubectl"

step "wait for the nodes to be Ready (kovs-agent wrote each node's CNI config)"
"$KUBECTL" wait --for=condition=Ready node --all --timeout=120s
"$KUBECTL" get nodes -o wide

step "pods in namespaces red and blue, spread over the nodes"
for ns in red blue; do
  "$KUBECTL" create namespace "$ns" >/dev/null
  for n in 1 2 3; do
    cat <<YAML | "$KUBECTL" apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: $ns-$n, namespace: $ns, labels: {app: $ns}}
spec:
  nodeName: node$n
  containers: [{name: responder, image: kovs/responder}]
YAML
  done
done
"$KUBECTL" wait --for=condition=Ready pod --all -n red --timeout=120s >/dev/null
"$KUBECTL" wait --for=condition=Ready pod --all -n blue --timeout=120s >/dev/null
"$KUBECTL" get pods -A -o wide

step "connectivity matrix, TCP port 80 (cell: the source address the receiver saw)"
sbx matrix --port 80/tcp red blue
step "connectivity matrix, UDP port 81"
sbx matrix --port 81/udp red blue

step "ofproto/trace of one cross-node packet (red-1 on node1 -> blue-2 on node2), on node1's br-int"
src_ip=$("$KUBECTL" get pod -n red red-1 -o jsonpath='{.status.podIP}')
dst_ip=$("$KUBECTL" get pod -n blue blue-2 -o jsonpath='{.status.podIP}')
src_mac=$(sbx exec red/red-1 -- cat /sys/class/net/eth0/address)
gw_mac=$(sbx exec red/red-1 -- ip neigh show | awk '/lladdr/ {print $5; exit}')
ofport=$(ovs-vsctl --db "unix:/run/kovs-sandbox/$NAME/nodes/node1/ovs/db.sock" --bare --columns ofport find Interface "external_ids:kovs.io/pod-name=red-1")
proto=tcp; [ "${src_ip#*:}" != "$src_ip" ] && proto=tcp6
flow="in_port=$ofport,$proto,dl_src=$src_mac,dl_dst=${gw_mac:-ff:ff:ff:ff:ff:ff},nw_src=$src_ip,nw_dst=$dst_ip,nw_ttl=64,tp_src=40000,tp_dst=80"
[ "$proto" = tcp6 ] && flow=${flow//nw_src/ipv6_src} && flow=${flow//nw_dst/ipv6_dst} && flow=${flow//nw_ttl/nw_ttl}
echo "ovs-appctl ofproto/trace br-int '$flow' --ct-next 'trk,new'"
ovs-appctl -t "/run/kovs-sandbox/$NAME/nodes/node1/ovs/ovs-vswitchd.ctl" ofproto/trace br-int "$flow" --ct-next 'trk,new' |
  grep -E '^( *[0-9]+\.|bridge|Final flow|Datapath actions|  *-> |  *(set_field|output|ct|goto_table|dec_ttl|move))' | sed 's/^/  /'
echo
echo "table numbers: see ovs-flows/README.md (0 Classifier, 10 SpoofGuard, 30 ConntrackZone, 31 ConntrackState,"
echo "50 EgressPolicy, 60 L3Forwarding, 61 L3DecTTL, 70 IngressPolicy, 80 ConntrackCommit, 90 Output)"
