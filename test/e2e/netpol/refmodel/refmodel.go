// Package refmodel is the second NetworkPolicy model of the truth tables: SIG Network's
// reference implementation, sigs.k8s.io/kube-network-policies v0.8.0, whose evaluator
// decides every connection here. Its verdicts are computed by its own code, unmodified,
// pinned by go.sum: the package's controller is built on informer stores this package
// fills (no API server, no nfqueue), and the two functions its packet path calls for
// NetworkPolicy, getNetworkPoliciesForPod and evaluator, are reached by go:linkname,
// since the module exports no evaluator. Only tests import this package.
//
// What the reference's packet path does around those two functions is repeated in
// Allowed, as evaluatePacket (controller.go) does it without AdminNetworkPolicy: the
// egress policies of the source pod, then the ingress policies of the destination pod.
// The objects get the defaults the API server gives them before the reference sees them
// (policyTypes, the protocol of ports and container ports, the kubernetes.io/metadata.name
// namespace label), since the reference reads stored objects.
package refmodel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	_ "unsafe" // go:linkname

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	knp "sigs.k8s.io/kube-network-policies/pkg/networkpolicy"

	"github.com/kovs-net/kovs/test/e2e/netpol/policymodel"
)

//go:linkname policiesForPod sigs.k8s.io/kube-network-policies/pkg/networkpolicy.(*Controller).getNetworkPoliciesForPod
func policiesForPod(c *knp.Controller, pod *corev1.Pod) []*networkingv1.NetworkPolicy

//go:linkname evaluator sigs.k8s.io/kube-network-policies/pkg/networkpolicy.(*Controller).evaluator
func evaluator(c *knp.Controller, ctx context.Context, policies []*networkingv1.NetworkPolicy,
	policyType networkingv1.PolicyType, srcPod *corev1.Pod, srcPort int, dstPod *corev1.Pod, dstIP net.IP,
	dstPort int, proto corev1.Protocol) bool

// ErrNodeTraffic marks a connection between a node (a hostNetwork pod) and a pod on that
// node, which the NetworkPolicy documentation always allows: the reference's evaluator
// sees the node's address as no pod and would decide it by the policies alone, so its
// verdict there is not a reading of the API (see docs/networkpolicy-semantics.md).
var ErrNodeTraffic = errors.New("between a node and its own pod: the reference's evaluator has no notion of the node")

// Reference answers for one cluster state at a time; Set replaces it.
type Reference struct {
	controller *knp.Controller
	namespaces cache.Indexer
	pods       cache.Indexer
	policies   cache.Indexer
	cluster    *policymodel.Cluster
}

// New builds the reference's controller on empty stores.
func New() (*Reference, error) {
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	np := factory.Networking().V1().NetworkPolicies()
	ns := factory.Core().V1().Namespaces()
	pods := factory.Core().V1().Pods()
	c, err := knp.NewController(client, np, ns, pods, factory.Core().V1().Nodes(), nil, nil, nil,
		knp.Config{NodeName: "refmodel", NRIdisabled: true})
	if err != nil {
		return nil, fmt.Errorf("kube-network-policies controller: %w", err)
	}
	return &Reference{controller: c, namespaces: ns.Informer().GetIndexer(), pods: pods.Informer().GetIndexer(),
		policies: np.Informer().GetIndexer()}, nil
}

// Set makes the reference's stores hold the cluster, with the API server's defaults.
func (r *Reference) Set(cl *policymodel.Cluster) error {
	var nss, pods, pols []any
	for i := range cl.Namespaces {
		n := cl.Namespaces[i].DeepCopy()
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[corev1.LabelMetadataName] = n.Name
		nss = append(nss, n)
	}
	for i := range cl.Pods {
		p := cl.Pods[i].DeepCopy()
		for c := range p.Spec.Containers {
			for j := range p.Spec.Containers[c].Ports {
				if p.Spec.Containers[c].Ports[j].Protocol == "" {
					p.Spec.Containers[c].Ports[j].Protocol = corev1.ProtocolTCP
				}
			}
		}
		pods = append(pods, p)
	}
	for i := range cl.Policies {
		np, err := stored(&cl.Policies[i])
		if err != nil {
			return err
		}
		pols = append(pols, defaultPolicy(np))
	}
	for _, s := range []struct {
		store cache.Indexer
		objs  []any
	}{{r.namespaces, nss}, {r.pods, pods}, {r.policies, pols}} {
		if err := s.store.Replace(s.objs, ""); err != nil {
			return err
		}
	}
	r.cluster = cl
	return nil
}

// stored returns the policy as a client reads it back from the API server: through its
// serialization, which drops empty lists (omitempty), so "ingress: []" reads back as no
// ingress rules at all. The reference relies on it: its evaluator takes an empty, non-nil
// rule list for "allow everything" and nil for "allow nothing".
func stored(np *networkingv1.NetworkPolicy) (*networkingv1.NetworkPolicy, error) {
	data, err := json.Marshal(np)
	if err != nil {
		return nil, err
	}
	out := &networkingv1.NetworkPolicy{}
	if err := json.Unmarshal(data, out); err != nil {
		return nil, fmt.Errorf("policy %s/%s: %w", np.Namespace, np.Name, err)
	}
	return out, nil
}

// defaultPolicy gives a policy the defaults the API server stores it with.
func defaultPolicy(np *networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy {
	if len(np.Spec.PolicyTypes) == 0 {
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		if len(np.Spec.Egress) > 0 {
			np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		}
	}
	tcp := corev1.ProtocolTCP
	defaultPorts := func(ports []networkingv1.NetworkPolicyPort) {
		for i := range ports {
			if ports[i].Protocol == nil {
				ports[i].Protocol = &tcp
			}
		}
	}
	for i := range np.Spec.Ingress {
		defaultPorts(np.Spec.Ingress[i].Ports)
	}
	for i := range np.Spec.Egress {
		defaultPorts(np.Spec.Egress[i].Ports)
	}
	return np
}

// Allowed reports the reference's verdict on the connection. A pod reaching its own
// address is allowed without asking it: that traffic stays in the pod's network
// namespace and never reaches the hooks where the reference queues packets.
func (r *Reference) Allowed(conn policymodel.Connection) (bool, error) {
	src, srcIP, err := r.end(conn.From, conn.IPv6)
	if err != nil {
		return false, err
	}
	dst, dstIP, err := r.end(conn.To, conn.IPv6)
	if err != nil {
		return false, err
	}
	if conn.From == conn.To {
		return true, nil
	}
	if (src.Spec.HostNetwork || dst.Spec.HostNetwork) && src.Spec.NodeName == dst.Spec.NodeName {
		return false, ErrNodeTraffic
	}
	// A hostNetwork pod's address is its node's: the reference's pod index leaves such pods
	// out (podIPIndex in controller.go), so for it that end is no pod.
	if src.Spec.HostNetwork {
		src = nil
	}
	if dst.Spec.HostNetwork {
		dst = nil
	}
	// The reference's source port is the client's ephemeral port; no rule reads it.
	const srcPort = 40000
	ctx := context.Background()
	c := r.controller
	if !evaluator(c, ctx, policiesForPod(c, src), networkingv1.PolicyTypeEgress, src, srcPort, dst,
		net.IP(dstIP.AsSlice()), int(conn.Port), conn.Protocol) {
		return false, nil
	}
	if pols := policiesForPod(c, dst); len(pols) > 0 {
		return evaluator(c, ctx, pols, networkingv1.PolicyTypeIngress, dst, int(conn.Port), src,
			net.IP(srcIP.AsSlice()), srcPort, conn.Protocol), nil
	}
	return true, nil
}

// end returns the stored pod called key and its address of the connection's family.
func (r *Reference) end(key string, ipv6 bool) (*corev1.Pod, netip.Addr, error) {
	obj, ok, err := r.pods.GetByKey(key)
	if err != nil || !ok {
		return nil, netip.Addr{}, fmt.Errorf("no pod %s in the reference's store", key)
	}
	pod := obj.(*corev1.Pod)
	for _, ip := range pod.Status.PodIPs {
		a, err := netip.ParseAddr(ip.IP)
		if err != nil {
			return nil, netip.Addr{}, fmt.Errorf("pod %s: address %q: %w", key, ip.IP, err)
		}
		if a.Is6() == ipv6 {
			return pod, a, nil
		}
	}
	return nil, netip.Addr{}, fmt.Errorf("pod %s has no address of the connection's family", key)
}
