#!/usr/bin/env bash
# demo.sh: a 3-node kovs sandbox, pods in two namespaces on different nodes, the
# pod-to-pod connectivity matrix with the source address each receiver saw, a kovsctl
# trace of one allowed cross-node packet, then a NetworkPolicy, the matrix again, and a
# trace of a packet it denies, naming the policy. Tears the sandbox down at the end unless
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

step "trace one cross-node packet (red-1 on node1 -> blue-2 on node2, tcp/80) with kovsctl"
echo "kovsctl runs ovs-appctl ofproto/trace on node1's br-int, follows the packet through the tunnel"
echo "into node2's br-int, and names every table (--raw prints the untouched ofproto/trace output)"
KOVSCTL=("$BIN/kovsctl" --ovs-dir "/run/kovs-sandbox/$NAME/nodes/{node}/ovs")
"${KOVSCTL[@]}" trace red/red-1 blue/blue-2 --port 80 --proto tcp

step "NetworkPolicy blue/web-from-blue: blue pods accept TCP 80 from blue pods only"
cat <<YAML | "$KUBECTL" apply -f -
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-from-blue, namespace: blue}
spec:
  podSelector: {matchLabels: {app: blue}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {app: blue}}}]
    ports: [{protocol: TCP, port: 80}]
YAML
echo "kovs-controller records on the policy when every node it concerns enforces it:"
for _ in $(seq 60); do
  "${KOVSCTL[@]}" policies --namespace blue | grep -q '^blue/web-from-blue  *yes ' && break
  sleep 0.5
done
"${KOVSCTL[@]}" policies --namespace blue

step "connectivity matrix, TCP port 80, with the policy (red -> blue now gets no answer)"
sbx matrix --port 80/tcp red blue || true

step "trace the denied packet (red-1 -> blue-2, tcp/80): kovsctl names the table and the NetworkPolicy"
"${KOVSCTL[@]}" trace red/red-1 blue/blue-2 --port 80 --proto tcp
