package policymodel

import (
	"errors"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// ErrUnspecified marks a connection whose verdict the NetworkPolicy documentation leaves
// to the network plugin.
var ErrUnspecified = errors.New("not specified by the NetworkPolicy API")

// Cluster is the state the verdicts are computed from.
type Cluster struct {
	Namespaces []corev1.Namespace
	Pods       []corev1.Pod
	Policies   []networkingv1.NetworkPolicy
}

// Connection is one connection attempt between two pods of the cluster, to a port of the
// destination, over IPv4 or IPv6 (the pods' addresses of that family).
type Connection struct {
	From, To string // namespace/name
	Protocol corev1.Protocol
	Port     int32
	IPv6     bool
}

func (c Connection) String() string {
	family := "IPv4"
	if c.IPv6 {
		family = "IPv6"
	}
	return fmt.Sprintf("%s -> %s %d/%s over %s", c.From, c.To, c.Port, c.Protocol, family)
}

// end is one end of a connection: its pod and the address it uses.
type end struct {
	pod  *corev1.Pod
	addr netip.Addr
}

func (e end) selectable() bool { return !e.pod.Spec.HostNetwork }

// Allowed reports whether the connection is allowed.
func (c *Cluster) Allowed(conn Connection) (bool, error) {
	from, err := c.end(conn.From, conn.IPv6)
	if err != nil {
		return false, err
	}
	to, err := c.end(conn.To, conn.IPv6)
	if err != nil {
		return false, err
	}
	if conn.From == conn.To {
		return true, nil // a pod cannot block access to itself
	}
	out, err := c.egressAllows(from, to, conn)
	if err != nil || !out {
		return false, err
	}
	return c.ingressAllows(from, to, conn)
}

func (c *Cluster) end(key string, ipv6 bool) (end, error) {
	p := c.pod(key)
	if p == nil {
		return end{}, fmt.Errorf("no pod %s in the cluster", key)
	}
	for _, ip := range p.Status.PodIPs {
		a, err := netip.ParseAddr(ip.IP)
		if err != nil {
			return end{}, fmt.Errorf("pod %s: address %q: %w", key, ip.IP, err)
		}
		if a.Is6() == ipv6 {
			return end{pod: p, addr: a}, nil
		}
	}
	return end{}, fmt.Errorf("pod %s has no address of the connection's family", key)
}

func (c *Cluster) pod(key string) *corev1.Pod {
	for i := range c.Pods {
		if c.Pods[i].Namespace+"/"+c.Pods[i].Name == key {
			return &c.Pods[i]
		}
	}
	return nil
}

// sameNode reports whether a is the node b runs on, i.e. a is a hostNetwork pod there.
func sameNode(a, b end) bool {
	return a.pod.Spec.HostNetwork && a.pod.Spec.NodeName == b.pod.Spec.NodeName
}

// egressAllows applies the source pod's egress isolation.
func (c *Cluster) egressAllows(from, to end, conn Connection) (bool, error) {
	if !from.selectable() || sameNode(to, from) {
		return true, nil // the node's traffic; traffic to a pod's own node
	}
	return c.isolationAllows(networkingv1.PolicyTypeEgress, from, to, to, conn)
}

// ingressAllows applies the destination pod's ingress isolation.
func (c *Cluster) ingressAllows(from, to end, conn Connection) (bool, error) {
	if !to.selectable() || sameNode(from, to) {
		return true, nil // the node is not isolated; the node reaches its own pods
	}
	return c.isolationAllows(networkingv1.PolicyTypeIngress, to, from, to, conn)
}

// isolationAllows applies the isolation of pod subject in direction dir: allowed when no
// policy of its namespace selects it for dir, or a rule of one that does matches peer
// (the other end) and the port; dst is the connection's destination.
func (c *Cluster) isolationAllows(dir networkingv1.PolicyType, subject, peer, dst end, conn Connection) (bool, error) {
	isolated := false
	for i := range c.Policies {
		np := &c.Policies[i]
		if np.Namespace != subject.pod.Namespace || !isolates(np, dir) {
			continue
		}
		selects, err := c.selectsTarget(np, subject)
		if err != nil {
			return false, err
		}
		if !selects {
			continue
		}
		isolated = true
		for _, r := range rulesOf(np, dir) {
			ok, err := c.ruleAllows(np, r.peers, r.ports, peer, dst, conn)
			if err != nil || ok {
				return ok, err
			}
		}
	}
	return !isolated, nil
}

// rule is an ingress or egress rule: its peers (from or to) and ports.
type rule struct {
	peers []networkingv1.NetworkPolicyPeer
	ports []networkingv1.NetworkPolicyPort
}

func rulesOf(np *networkingv1.NetworkPolicy, dir networkingv1.PolicyType) []rule {
	var out []rule
	if dir == networkingv1.PolicyTypeIngress {
		for _, r := range np.Spec.Ingress {
			out = append(out, rule{peers: r.From, ports: r.Ports})
		}
		return out
	}
	for _, r := range np.Spec.Egress {
		out = append(out, rule{peers: r.To, ports: r.Ports})
	}
	return out
}

// selectsTarget reports whether the policy's spec.podSelector selects the pod.
func (c *Cluster) selectsTarget(np *networkingv1.NetworkPolicy, e end) (bool, error) {
	if !e.selectable() {
		return false, nil
	}
	ok, err := matches(&np.Spec.PodSelector, e.pod.Labels)
	if err != nil {
		return false, fmt.Errorf("policy %s/%s podSelector: %w", np.Namespace, np.Name, err)
	}
	return ok, nil
}

// isolates reports whether the policy isolates its pods in direction t, with policyTypes
// defaulted as documented: Ingress always, Egress when there are egress rules.
func isolates(np *networkingv1.NetworkPolicy, t networkingv1.PolicyType) bool {
	types := np.Spec.PolicyTypes
	if len(types) == 0 {
		types = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		if len(np.Spec.Egress) > 0 {
			types = append(types, networkingv1.PolicyTypeEgress)
		}
	}
	for _, x := range types {
		if x == t {
			return true
		}
	}
	return false
}

// ruleAllows reports whether a rule with these peers and ports allows the connection:
// peer is the other end (the source of an ingress rule, the destination of an egress
// rule), dst the destination, whose container ports give named ports their numbers.
func (c *Cluster) ruleAllows(np *networkingv1.NetworkPolicy, peers []networkingv1.NetworkPolicyPeer,
	ports []networkingv1.NetworkPolicyPort, peer, dst end, conn Connection) (bool, error) {
	portOK, err := portsMatch(ports, dst, conn)
	if err != nil || !portOK {
		return false, err
	}
	if len(peers) == 0 {
		return true, nil
	}
	for _, p := range peers {
		ok, err := c.peerMatches(np, p, peer, dst)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// peerMatches reports whether one peer matches the other end e of the connection.
func (c *Cluster) peerMatches(np *networkingv1.NetworkPolicy, p networkingv1.NetworkPolicyPeer, e, dst end) (bool, error) {
	what := fmt.Sprintf("policy %s/%s peer", np.Namespace, np.Name)
	if p.IPBlock != nil {
		if e.pod.Spec.HostNetwork && e != dst {
			// A node sending to a pod elsewhere: the documentation does not say which of
			// its addresses policy sees (nor whether it is rewritten on the way).
			return false, fmt.Errorf("%s ipBlock %s for traffic from node %s: %w", what, p.IPBlock.CIDR, e.pod.Spec.NodeName, ErrUnspecified)
		}
		ok, err := inBlock(p.IPBlock, e.addr)
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		return ok, nil
	}
	if p.PodSelector == nil && p.NamespaceSelector == nil {
		return false, fmt.Errorf("%s: neither podSelector, namespaceSelector nor ipBlock (the API server rejects it)", what)
	}
	if !e.selectable() {
		return false, nil
	}
	if p.NamespaceSelector == nil {
		if e.pod.Namespace != np.Namespace {
			return false, nil
		}
	} else {
		ok, err := matches(p.NamespaceSelector, c.namespaceLabels(e.pod.Namespace))
		if err != nil || !ok {
			return false, wrap(what+" namespaceSelector", err)
		}
	}
	if p.PodSelector == nil {
		return true, nil
	}
	ok, err := matches(p.PodSelector, e.pod.Labels)
	return ok, wrap(what+" podSelector", err)
}

// namespaceLabels are a namespace's labels, with the one the API server sets on every
// namespace.
func (c *Cluster) namespaceLabels(name string) map[string]string {
	out := map[string]string{"kubernetes.io/metadata.name": name}
	for _, ns := range c.Namespaces {
		if ns.Name == name {
			for k, v := range ns.Labels {
				out[k] = v
			}
		}
	}
	return out
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}
