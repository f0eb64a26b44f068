package addresses

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

// ReasonAddressTaken: a Node claims (in status.addresses, which its own kubelet writes) an
// InternalIP another Node's kovs.io/node-addresses holds; kovs-controller does not record
// it for the claimant (issue 29).
const ReasonAddressTaken = "NodeAddressTaken"

// addressHolders is which node holds which recorded address: first come, first served.
// It is loaded once from the Nodes' kovs.io/node-addresses (what was recorded before this
// controller started, or before it led), then kept as this controller records them, so a
// reconcile looks each address up instead of reading every Node.
type addressHolders struct {
	mu     sync.Mutex
	loaded bool
	byAddr map[netip.Addr]string
	byNode map[string][]netip.Addr
}

// load reads the recorded addresses of nodes, once.
func (h *addressHolders) load(nodes []*corev1.Node) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.loaded {
		return
	}
	h.loaded = true
	for _, n := range nodes {
		value, ok := n.Annotations[ipam.NodeAddressesAnnotationKey]
		if !ok {
			continue
		}
		addrs, err := ipam.ParseNodeAddressesAnnotation(value)
		if err != nil {
			log.WithField("node", n.Name).WithError(err).Warn("unreadable node addresses record: its addresses are free to others")
			continue
		}
		h.setLocked(n.Name, addrs)
	}
}

// holder is the node other than self that holds ip, or "".
func (h *addressHolders) holder(ip netip.Addr, self string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := h.byAddr[ip]; n != self {
		return n
	}
	return ""
}

// set records node's addresses, releasing those it held before.
func (h *addressHolders) set(node string, addrs []netip.Addr) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.setLocked(node, addrs)
}

func (h *addressHolders) setLocked(node string, addrs []netip.Addr) {
	if h.byAddr == nil {
		h.byAddr, h.byNode = map[netip.Addr]string{}, map[string][]netip.Addr{}
	}
	for _, ip := range h.byNode[node] {
		if h.byAddr[ip] == node {
			delete(h.byAddr, ip)
		}
	}
	for _, ip := range addrs {
		if _, held := h.byAddr[ip]; !held {
			h.byAddr[ip] = node
		}
	}
	h.byNode[node] = addrs
}

// drop releases a deleted node's addresses.
func (h *addressHolders) drop(node string) { h.set(node, nil) }

// tunnelAddresses are the node's InternalIPs, in its order, that no other Node holds:
// what kovs.io/node-addresses records for it. taken lists the others and their holders.
func (r *NodeReconciler) tunnelAddresses(node *corev1.Node) (keep []netip.Addr, taken []string, err error) {
	if !r.holders.isLoaded() {
		nodes, err := r.Nodes.List(labels.Everything())
		if err != nil {
			return nil, nil, err
		}
		r.holders.load(nodes)
	}
	seen := map[netip.Addr]bool{}
	for _, a := range node.Status.Addresses {
		ip, err := netip.ParseAddr(a.Address)
		if a.Type != corev1.NodeInternalIP || err != nil || seen[ip] {
			continue
		}
		seen[ip] = true
		if holder := r.holders.holder(ip, node.Name); holder != "" {
			taken = append(taken, fmt.Sprintf("%s (node %s's)", ip, holder))
			continue
		}
		keep = append(keep, ip)
	}
	return keep, taken, nil
}

func (h *addressHolders) isLoaded() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.loaded
}

// reportTaken makes a refused claim loud: an Event on the claimant and a log line.
func (r *NodeReconciler) reportTaken(node *corev1.Node, taken []string) {
	msg := fmt.Sprintf("node %s claims InternalIP %s, held by another node: not recorded in %s (a node's tunnel identity is not its kubelet's to take)",
		node.Name, strings.Join(taken, ", "), ipam.NodeAddressesAnnotationKey)
	log.WithField("node", node.Name).Warn(msg)
	r.Recorder.Event(node, corev1.EventTypeWarning, ReasonAddressTaken, msg)
}
