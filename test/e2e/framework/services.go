package framework

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
)

// Client is where a probe starts: a pod, a node (its network namespace) or a host outside
// the cluster on the underlay. Addrs are the addresses it sends from, primary family first.
type Client struct {
	Name  string
	NetNS string // path of the network namespace
	Addrs []netip.Addr
}

// PodClient is a running pod as a probe client.
func (s *Sandbox) PodClient(p *corev1.Pod) Client {
	return Client{Name: p.Namespace + "/" + p.Name, NetNS: s.NetNSPath(p), Addrs: PodIPs(p)}
}

// NodeClient is a node's own network namespace (where kubelet and host daemons run) as a
// probe client; its addresses are the node's underlay addresses.
func (s *Sandbox) NodeClient(t testing.TB, node string) Client {
	t.Helper()
	return Client{Name: node, NetNS: sandbox.NetNSPath(s.Layout.NodeNetNS(node)), Addrs: s.NodeIPs(t, node)}
}

// NodeIPs are a node's underlay addresses (its InternalIPs), primary family first.
func (s *Sandbox) NodeIPs(t testing.TB, node string) []netip.Addr {
	t.Helper()
	st, err := s.Layout.LoadState()
	if err != nil {
		t.Fatal(err)
	}
	n, ok := st.Node(node)
	if !ok {
		t.Fatalf("sandbox %s has no node %s", s.Layout.Name, node)
	}
	var out []netip.Addr
	for _, ip := range n.IPs {
		out = append(out, netip.MustParseAddr(ip))
	}
	return out
}

// ExternalClient is the sandbox's external host as a probe client: a host outside the
// cluster, on the nodes' network, that is neither a node nor a pod and has no route to
// any pod CIDR (sandbox.ExternalAddrs). Its ordinary addresses of the sandbox's families
// come first.
func (s *Sandbox) ExternalClient(t testing.TB) Client {
	t.Helper()
	st, err := s.Layout.LoadState()
	if err != nil {
		t.Fatal(err)
	}
	c := Client{Name: "external", NetNS: sandbox.NetNSPath(s.Layout.ExternalNetNS())}
	for _, a := range sandbox.ExternalAddrs(st.Family) {
		if a != sandbox.ExternalRoutedV4 && a != sandbox.ExternalRoutedV6 {
			c.Addrs = append(c.Addrs, a)
		}
	}
	return c
}

// ProbeFrom connects from the client's namespace to addr:port ("80/tcp").
func (s *Sandbox) ProbeFrom(c Client, addr netip.Addr, port string, timeout time.Duration) responder.Result {
	p, err := responder.ParsePort(port)
	if err != nil {
		return responder.Result{Error: err.Error()}
	}
	return probeIn(c, func() responder.Result {
		return responder.Probe(context.Background(), responder.Target{Addr: addr, Port: p}, timeout)
	})
}

// ProbeDatagramFrom probes addr:port/udp from the client's namespace with a datagram of
// size bytes (sent in fragments when larger than the path's MTU).
func (s *Sandbox) ProbeDatagramFrom(c Client, addr netip.Addr, port uint16, size int, timeout time.Duration) responder.Result {
	return probeIn(c, func() responder.Result {
		t := responder.Target{Addr: addr, Port: responder.Port{Number: port, Protocol: responder.UDP}}
		return responder.ProbeDatagram(context.Background(), t, size, timeout)
	})
}

// ProbeSCTPFromPort probes addr:port/sctp from the client's namespace from source port
// srcPort: probes from one port are, to the network, packets of one association.
func (s *Sandbox) ProbeSCTPFromPort(c Client, addr netip.Addr, port uint16, srcPort uint16, timeout time.Duration) responder.Result {
	return probeIn(c, func() responder.Result {
		t := responder.Target{Addr: addr, Port: responder.Port{Number: port, Protocol: responder.SCTP}}
		return responder.ProbeSCTPFromPort(context.Background(), t, srcPort, timeout)
	})
}

// probeIn runs probe on an OS thread in the client's network namespace.
func probeIn(c Client, probe func() responder.Result) responder.Result {
	var res responder.Result
	err := ns.WithNetNSPath(c.NetNS, func(ns.NetNS) error {
		res = probe()
		return nil
	})
	if err != nil {
		res.Error = err.Error()
	}
	return res
}

// DialFrom opens a long-lived session (responder.Session) from the client to addr:port/tcp.
func (s *Sandbox) DialFrom(c Client, addr netip.Addr, port string, timeout time.Duration) (*responder.Session, error) {
	p, err := responder.ParsePort(port)
	if err != nil {
		return nil, err
	}
	var sess *responder.Session
	err = ns.WithNetNSPath(c.NetNS, func(ns.NetNS) error {
		var err error
		sess, err = responder.Dial(context.Background(), responder.Target{Addr: addr, Port: p}, timeout)
		return err
	})
	return sess, err
}

// Answers counts which responder answered each of a series of new connections (by
// identity; "" counts the probes no responder answered) and keeps the results.
type Answers struct {
	ByIdentity map[string]int
	Results    []responder.Result
}

// Spread makes n probes one after the other and counts who answered.
func (s *Sandbox) Spread(c Client, addr netip.Addr, port string, n int, timeout time.Duration) Answers {
	var results []responder.Result
	for range n {
		results = append(results, s.ProbeFrom(c, addr, port, timeout))
	}
	return CountAnswers(results)
}

// CountAnswers counts who answered each of results.
func CountAnswers(results []responder.Result) Answers {
	a := Answers{ByIdentity: map[string]int{}, Results: results}
	for _, r := range results {
		id := ""
		if r.Connected && r.Reply != nil {
			id = r.Reply.Identity
		}
		a.ByIdentity[id]++
	}
	return a
}

// Identities are the responders that answered, sorted.
func (a Answers) Identities() []string {
	var out []string
	for id := range a.ByIdentity {
		if id != "" {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// Unanswered is how many probes no responder answered.
func (a Answers) Unanswered() int { return a.ByIdentity[""] }

// String is "ns/a=12 ns/b=8 unanswered=1" for failure messages, with the first failure.
func (a Answers) String() string {
	var parts []string
	for _, id := range a.Identities() {
		parts = append(parts, fmt.Sprintf("%s=%d", id, a.ByIdentity[id]))
	}
	if n := a.Unanswered(); n > 0 {
		parts = append(parts, fmt.Sprintf("unanswered=%d", n))
		for _, r := range a.Results {
			if !r.Connected || r.Reply == nil {
				parts = append(parts, "(first: "+Describe(r)+")")
				break
			}
		}
	}
	return strings.Join(parts, " ")
}

// CreateService creates a Service and returns it as stored, with its ClusterIPs.
func (s *Sandbox) CreateService(t testing.TB, svc *corev1.Service) *corev1.Service {
	t.Helper()
	s.EnsureNamespace(t, svc.Namespace, nil)
	out, err := s.Client.CoreV1().Services(svc.Namespace).Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service %s/%s: %v", svc.Namespace, svc.Name, err)
	}
	return out
}

// ClusterIPs are a Service's cluster IPs, primary family first.
func ClusterIPs(svc *corev1.Service) []netip.Addr {
	var out []netip.Addr
	for _, ip := range svc.Spec.ClusterIPs {
		if a, err := netip.ParseAddr(ip); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// SliceEndpoint is one endpoint of a hand-written EndpointSlice.
type SliceEndpoint struct {
	Addr netip.Addr
	Node string
	// Pod, when set, is the endpoint's targetRef (namespace/name from the pod).
	Pod *corev1.Pod
	// Ready, Serving, Terminating are the endpoint's conditions.
	Ready, Serving, Terminating bool
	// Zones, if any, are the endpoint's hints.forZones (topology-aware routing), as
	// kube-controller-manager would write them.
	Zones []string
}

// ReadyEndpoint is the endpoint of a running, ready pod (first address of the family of
// like, or its first address).
func ReadyEndpoint(p *corev1.Pod, like netip.Addr) SliceEndpoint {
	addr := PodIPs(p)[0]
	for _, a := range PodIPs(p) {
		if a.Is4() == like.Is4() {
			addr = a
			break
		}
	}
	return SliceEndpoint{Addr: addr, Node: p.Spec.NodeName, Pod: p, Ready: true, Serving: true}
}

// EndpointSliceManagedBy marks the slices tests write, so kube-controller-manager leaves
// them alone (it manages only slices of Services with a selector anyway).
const EndpointSliceManagedBy = "e2e.kovs.io"

// EndpointSliceFor builds an EndpointSlice called name for the (selector-less) Service
// svc, with the given ports and endpoints, all of one address family.
func EndpointSliceFor(svc *corev1.Service, name string, ports []discoveryv1.EndpointPort, eps []SliceEndpoint) *discoveryv1.EndpointSlice {
	family := discoveryv1.AddressTypeIPv4
	if len(eps) > 0 && eps[0].Addr.Is6() {
		family = discoveryv1.AddressTypeIPv6
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc.Name,
			discoveryv1.LabelManagedBy:   EndpointSliceManagedBy,
		}},
		AddressType: family,
		Ports:       ports,
		Endpoints:   []discoveryv1.Endpoint{},
	}
	for _, e := range eps {
		ep := discoveryv1.Endpoint{Addresses: []string{e.Addr.String()}, Conditions: discoveryv1.EndpointConditions{
			Ready: ptr.To(e.Ready), Serving: ptr.To(e.Serving), Terminating: ptr.To(e.Terminating)}}
		if e.Node != "" {
			ep.NodeName = ptr.To(e.Node)
		}
		if len(e.Zones) > 0 {
			ep.Hints = &discoveryv1.EndpointHints{}
			for _, z := range e.Zones {
				ep.Hints.ForZones = append(ep.Hints.ForZones, discoveryv1.ForZone{Name: z})
			}
		}
		if e.Pod != nil {
			ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: e.Pod.Namespace, Name: e.Pod.Name, UID: e.Pod.UID}
		}
		slice.Endpoints = append(slice.Endpoints, ep)
	}
	return slice
}

// ApplyEndpointSlice creates the slice or replaces the one of the same name.
func (s *Sandbox) ApplyEndpointSlice(t testing.TB, slice *discoveryv1.EndpointSlice) {
	t.Helper()
	c := s.Client.DiscoveryV1().EndpointSlices(slice.Namespace)
	ctx := context.Background()
	old, err := c.Get(ctx, slice.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = c.Create(ctx, slice, metav1.CreateOptions{})
	case err == nil:
		slice.ResourceVersion = old.ResourceVersion
		_, err = c.Update(ctx, slice, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("apply EndpointSlice %s/%s: %v", slice.Namespace, slice.Name, err)
	}
}

// EndpointPort is an EndpointSlice port.
func EndpointPort(name string, port int32, proto corev1.Protocol) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr.To(name), Port: ptr.To(port), Protocol: ptr.To(proto)}
}

// WaitEndpoints waits until kube-controller-manager's EndpointSlices of a Service list
// exactly the named pods (by targetRef) as ready endpoints.
func (s *Sandbox) WaitEndpoints(t testing.TB, namespace, service string, pods []string, timeout time.Duration) {
	t.Helper()
	want := append([]string(nil), pods...)
	sort.Strings(want)
	Eventually(t, timeout, fmt.Sprintf("EndpointSlices of %s/%s to list %v ready", namespace, service, want), func() error {
		list, err := s.Client.DiscoveryV1().EndpointSlices(namespace).List(context.Background(), metav1.ListOptions{
			LabelSelector: discoveryv1.LabelServiceName + "=" + service})
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, sl := range list.Items {
			for _, ep := range sl.Endpoints {
				if ep.TargetRef != nil && (ep.Conditions.Ready == nil || *ep.Conditions.Ready) {
					seen[ep.TargetRef.Name] = true
				}
			}
		}
		var got []string
		for n := range seen {
			got = append(got, n)
		}
		sort.Strings(got)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			return fmt.Errorf("ready endpoints %v", got)
		}
		return nil
	})
}
