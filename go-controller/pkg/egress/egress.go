// Package egress is the Egress resource (egresses.kovs.io, a CRD in dist/egress.yaml):
// pods chosen by namespace and pod selectors leave the cluster with a given egress IP,
// held by one node that a node selector allows. kovs-controller assigns the IP to a
// healthy node and records it in the status; every agent redirects its selected pods'
// traffic there, and the holder translates it. This package holds the API types, their
// conversion from unstructured objects (the controller and the agents use dynamic
// clients), validation, pod selection and the holders' heartbeat Leases; it is pure.
package egress

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Resource is the Egress resource.
var Resource = schema.GroupVersionResource{Group: "kovs.io", Version: "v1alpha1", Resource: "egresses"}

// Egress is one Egress object.
type Egress struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec   `json:"spec"`
	Status            Status `json:"status,omitempty"`
}

// Spec says which pods leave with which addresses through which nodes.
type Spec struct {
	// EgressIPs are the addresses the selected pods' traffic leaves with, at most one per
	// family; traffic of a family without one is masqueraded as usual.
	EgressIPs []string `json:"egressIPs"`
	// NamespaceSelector and PodSelector choose the pods (both: AND; a missing one selects
	// everything on its side, but one of them must be set).
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	PodSelector       *metav1.LabelSelector `json:"podSelector,omitempty"`
	// NodeSelector chooses the nodes that may hold the IPs (missing: every node).
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
}

// Status is what kovs-controller decided.
type Status struct {
	// Node holds the egress IPs; empty while no eligible node is healthy.
	Node string `json:"node,omitempty"`
	// ID is the Egress's number in the tunnel key (TunnelID) between the selected pods'
	// nodes and the holder, kept for the object's lifetime.
	ID         uint32             `json:"id,omitempty"`
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Condition types and reasons.
const (
	ConditionAssigned    = "Assigned"
	ReasonAssigned       = "Assigned"
	ReasonNoNode         = "NoEligibleNode"
	ReasonInvalid        = "Invalid"
	ReasonConflict       = "Conflict"
	MaxID                = 1<<16 - 1
	heartbeatLeasePrefix = "kovs-egress-"
)

// FromUnstructured converts a dynamic client's object.
func FromUnstructured(u *unstructured.Unstructured) (*Egress, error) {
	var e Egress
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &e); err != nil {
		return nil, fmt.Errorf("egress %s: %w", u.GetName(), err)
	}
	return &e, nil
}

// ToUnstructured converts for a dynamic client.
func (e *Egress) ToUnstructured() (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(e)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// IPs parses and checks the egress IPs: valid, at most one per family, none inside the
// cluster CIDRs (pod addresses).
func (s Spec) IPs(cluster []netip.Prefix) ([]netip.Addr, error) {
	if len(s.EgressIPs) == 0 {
		return nil, fmt.Errorf("spec.egressIPs is empty: give one address per family")
	}
	var out []netip.Addr
	for _, str := range s.EgressIPs {
		ip, err := netip.ParseAddr(str)
		if err != nil || ip.Zone() != "" {
			return nil, fmt.Errorf("spec.egressIPs: %q is not an IP address", str)
		}
		ip = ip.Unmap()
		if slices.ContainsFunc(out, func(o netip.Addr) bool { return o.Is4() == ip.Is4() }) {
			return nil, fmt.Errorf("spec.egressIPs: more than one %s address", family(ip))
		}
		for _, c := range cluster {
			if c.Contains(ip) {
				return nil, fmt.Errorf("spec.egressIPs: %s is inside cluster CIDR %s (a pod address)", ip, c)
			}
		}
		out = append(out, ip)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

func family(ip netip.Addr) string {
	if ip.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// Selects reports whether the Egress selects a pod with podLabels in a namespace with
// nsLabels. An invalid selector selects nothing.
func (s Spec) Selects(nsLabels, podLabels map[string]string) bool {
	if s.NamespaceSelector == nil && s.PodSelector == nil {
		return false
	}
	return matches(s.NamespaceSelector, nsLabels) && matches(s.PodSelector, podLabels)
}

// AllowsNode reports whether a node with nodeLabels may hold the Egress.
func (s Spec) AllowsNode(nodeLabels map[string]string) bool {
	return matches(s.NodeSelector, nodeLabels)
}

func matches(sel *metav1.LabelSelector, l map[string]string) bool {
	if sel == nil {
		return true
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false
	}
	return s.Matches(labels.Set(l))
}

// Validate says what is wrong with a spec, beyond its IPs.
func (s Spec) Validate() error {
	if s.NamespaceSelector == nil && s.PodSelector == nil {
		return fmt.Errorf("set spec.namespaceSelector, spec.podSelector or both: an Egress without selectors would take every pod of the cluster")
	}
	for name, sel := range map[string]*metav1.LabelSelector{"namespaceSelector": s.NamespaceSelector,
		"podSelector": s.PodSelector, "nodeSelector": s.NodeSelector} {
		if sel == nil {
			continue
		}
		if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
			return fmt.Errorf("spec.%s: %w", name, err)
		}
	}
	return nil
}

// Chosen is the Egress that applies to a pod when several select it: the first by name.
func Chosen(all []*Egress, nsLabels, podLabels map[string]string) *Egress {
	var best *Egress
	for _, e := range all {
		if e.Spec.Selects(nsLabels, podLabels) && (best == nil || e.Name < best.Name) {
			best = e
		}
	}
	return best
}

// TunnelIDBase is added to an Egress's ID to make the tunnel key (Geneve VNI) its
// selected pods' traffic crosses to the holder with; pod-to-pod traffic uses
// pipeline.TunnelVNI (100).
const TunnelIDBase = 1 << 16

// TunnelID is the tunnel key of Egress id.
func TunnelID(id uint32) uint64 { return TunnelIDBase + uint64(id) }

// HeartbeatLease is the Lease (in the agents' namespace) a node's agent renews while the
// node may hold egress IPs; the controller takes a node whose Lease expired for failed.
func HeartbeatLease(node string) string { return heartbeatLeasePrefix + node }

// HeartbeatLabel marks the heartbeat Leases; HeartbeatNodeLabel names the node.
const (
	HeartbeatLabel     = "kovs.io/egress-heartbeat"
	HeartbeatNodeLabel = "kovs.io/node"
	// HeartbeatCIDRsAnnotation on a heartbeat Lease lists the node's interface networks
	// (comma-separated): the node can hold an egress IP inside one of them (it answers
	// ARP and neighbour solicitations for it there).
	HeartbeatCIDRsAnnotation = "kovs.io/egress-cidrs"
)

// ParseCIDRs parses a heartbeat Lease's interface networks.
func ParseCIDRs(s string) []netip.Prefix {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if p, err := netip.ParsePrefix(strings.TrimSpace(f)); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// CanHold reports whether a node with interface networks cidrs can hold every ip.
func CanHold(cidrs []netip.Prefix, ips []netip.Addr) bool {
	for _, ip := range ips {
		if !slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			return false
		}
	}
	return true
}
