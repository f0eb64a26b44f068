package services_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// The sandbox runs OVS's userspace datapath, whose conntrack cannot translate SCTP ports:
// kovs translates SCTP Service ports without it (docs/services.md). These items prove the
// parts of that translation TCP and UDP get from conntrack: NodePorts, hairpin, and an
// association keeping its endpoint while the Service's endpoints change.

// testSCTPNodePort: an SCTP NodePort answers from the node itself, from other nodes and
// from a host outside the cluster, spread over all backends; with externalTrafficPolicy
// Local it reaches only the node's own backend, which sees the client's address.
func (c *svcCluster) testSCTPNodePort(t *testing.T) {
	svc := c.webService(t, "np-sctp", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort },
		svcPort("sctp", 132, intstr.FromInt32(9132), corev1.ProtocolSCTP))
	like := framework.ClusterIPs(svc)[0]
	node1 := c.nodeIP(t, "node1", like)
	p := port(nodePort(t, svc, "sctp"), corev1.ProtocolSCTP)
	froms := []framework.Client{c.s.NodeClient(t, "node1"), c.s.NodeClient(t, "node2"), c.s.ExternalClient(t)}
	for _, from := range froms {
		r := c.waitAnswered(t, from, node1, p, "SCTP NodePort of node1 from "+from.Name)
		if !slices.Contains(podKeys(c.web...), r.Reply.Identity) {
			t.Errorf("%s from %s answered by %s, not a backend", target(node1, p), from.Name, r.Reply.Identity)
		}
	}
	a := c.s.Spread(froms[1], node1, p, spreadProbes, probeTimeout)
	t.Logf("%s from node2: %s", target(node1, p), a)
	if err := allOf(a, podKeys(c.web...)...); err != nil {
		t.Errorf("SCTP NodePort (externalTrafficPolicy Cluster) from node2 to node1: %v", err)
	}

	local := c.webService(t, "np-sctp-local", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}, svcPort("sctp", 132, intstr.FromInt32(9132), corev1.ProtocolSCTP))
	lp := port(nodePort(t, local, "sctp"), corev1.ProtocolSCTP)
	ext := froms[2]
	c.waitAnswered(t, ext, node1, lp, "SCTP NodePort with externalTrafficPolicy Local")
	for _, r := range c.s.Spread(ext, node1, lp, 10, probeTimeout).Results {
		if !r.Connected || r.Reply == nil {
			t.Errorf("%s (externalTrafficPolicy Local) from %s: %s", target(node1, lp), ext.Name, framework.Describe(r))
			continue
		}
		if r.Reply.Identity != key(c.web[0]) {
			t.Errorf("%s (externalTrafficPolicy Local) answered by %s, want node1's own backend %s", target(node1, lp), r.Reply.Identity, key(c.web[0]))
		}
		if want := addrOf(ext, node1); r.Reply.Peer.Addr() != want {
			t.Errorf("externalTrafficPolicy Local: the backend saw source %s, want the client's own address %s", r.Reply.Peer.Addr(), want)
		}
	}
}

// testSCTPHairpin: a pod reaches itself through its SCTP Service; it sees the association
// come from the hairpin address, and its answer comes back from the Service.
func (c *svcCluster) testSCTPHairpin(t *testing.T) {
	ns := c.namespace(t, "hairpin-sctp")
	pods := c.createPods(t, framework.PodSpec{Namespace: ns, Name: "hp", Node: "node1", Labels: map[string]string{"app": "hp"},
		Ports: []corev1.ContainerPort{{ContainerPort: 9132, Protocol: corev1.ProtocolSCTP}}})
	svc := c.service(t, ns, "hp", map[string]string{"app": "hp"},
		[]corev1.ServicePort{svcPort("sctp", 132, intstr.FromInt32(9132), corev1.ProtocolSCTP)}, nil)
	c.s.WaitEndpoints(t, ns, "hp", podNames(pods), programTimeout)
	ip := framework.ClusterIPs(svc)[0]
	r := c.waitAnswered(t, c.s.PodClient(pods[0]), ip, "132/sctp", "SCTP hairpin (a pod through its own Service)")
	if r.Reply.Identity != key(pods[0]) {
		t.Errorf("SCTP hairpin answered by %s, want the pod itself", r.Reply.Identity)
	}
	want := pipeline.HairpinSNATv4
	if ip.Is6() {
		want = pipeline.HairpinSNATv6
	}
	if r.Reply.Peer.Addr() != want {
		t.Errorf("SCTP hairpin: the pod saw source %s, want the hairpin address %s", r.Reply.Peer.Addr(), want)
	}
}

// testSCTPAssociationKeepsEndpoint: an association (its client's address and port) stays
// on the endpoint its first packet reached while the Service's endpoints change, even once
// that endpoint is no longer ready, and across a NetworkPolicy change (which deletes the
// learned SCTP replies); new associations go to the current endpoints only. Once the
// endpoint has left the EndpointSlice altogether (its pod is gone), the association
// moves to a current endpoint instead of staying pinned to it.
func (c *svcCluster) testSCTPAssociationKeepsEndpoint(t *testing.T) {
	name := "sctp-pin"
	ns := c.namespace(t, name)
	svc := c.service(t, ns, name, nil, []corev1.ServicePort{svcPort("sctp", 132, intstr.FromInt32(9132), corev1.ProtocolSCTP)}, nil)
	ports := []discoveryv1.EndpointPort{framework.EndpointPort("sctp", 9132, corev1.ProtocolSCTP)}
	write := func(eps ...framework.SliceEndpoint) {
		c.s.ApplyEndpointSlice(t, framework.EndpointSliceFor(svc, name+"-1", ports, eps))
	}
	ip := framework.ClusterIPs(svc)[0]
	web := make([]framework.SliceEndpoint, len(c.web))
	for i, p := range c.web {
		web[i] = framework.ReadyEndpoint(p, ip)
	}
	write(web[0], web[1])
	from := c.client("node3")
	c.waitAnswered(t, from, ip, "132/sctp", "SCTP ClusterIP")

	const srcPort = 50132
	// freshSCTPPort starts drainProbes source ports below the dynamic range, which no
	// other probe of this test uses.
	const freshSCTPPort = 40000
	association := func() responder.Result {
		return c.s.ProbeSCTPFromPort(from, ip, 132, srcPort, probeTimeout)
	}
	first := association()
	if !first.Connected || first.Reply == nil {
		t.Fatalf("association from port %d: %s", srcPort, framework.Describe(first))
	}
	gone, rest := splitBackends(t, c.web[:2], first.Reply.Identity)
	t.Logf("association from port %d reached %s; marking it not ready and adding %s", srcPort, key(gone), key(c.web[2]))
	var current []framework.SliceEndpoint
	notReady := framework.SliceEndpoint{}
	for i, p := range c.web {
		if p != gone {
			current = append(current, web[i])
		} else {
			notReady = web[i]
			notReady.Ready, notReady.Serving, notReady.Terminating = false, false, false
		}
	}
	write(append(current, notReady)...)
	now := []string{key(rest), key(c.web[2])}
	framework.Eventually(t, programTimeout, "new associations to reach only "+strings.Join(now, " and "), func() error {
		return allOf(c.s.Spread(from, ip, "132/sctp", 20, probeTimeout), now...)
	})
	checkAssociation := func(when string) {
		t.Helper()
		for i := range 5 {
			r := association()
			if !r.Connected || r.Reply == nil {
				t.Errorf("%s: packet %d of the association from port %d: %s", when, i+1, srcPort, framework.Describe(r))
				continue
			}
			if r.Reply.Identity != key(gone) {
				t.Errorf("%s: the association from port %d moved from %s to %s", when, srcPort, key(gone), r.Reply.Identity)
			}
		}
	}
	checkAssociation("after its endpoint turned not ready")
	// New associations from ports no earlier probe used: the probes above came from random
	// dynamic ports (49152-65535), and one of them that reached the old endpoint keeps it
	// (its learned translation), so a drain probe reusing its port would be that
	// association, not a new one (a rehearsal once counted one hit on the old endpoint
	// here; such a reuse explains it, but that was not proven).
	var drained []responder.Result
	for i := range drainProbes {
		drained = append(drained, c.s.ProbeSCTPFromPort(from, ip, 132, freshSCTPPort+uint16(i), probeTimeout))
	}
	if err := onlyFrom(framework.CountAnswers(drained), now...); err != nil {
		t.Errorf("new associations after %s turned not ready: %v", key(gone), err)
	}

	// A NetworkPolicy change on the client's node deletes the learned SCTP replies, not the
	// learned translations.
	allowAll := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: c.webNS, Name: "allow-all-" + name},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{}}}}
	np := c.s.Client.NetworkingV1().NetworkPolicies(c.webNS)
	if _, err := np.Create(context.Background(), allowAll, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { np.Delete(context.Background(), allowAll.Name, metav1.DeleteOptions{}) })
	framework.Eventually(t, programTimeout, "node3 to delete its learned SCTP replies after the policy change", func() error {
		replies, pins := 0, 0
		for _, f := range c.s.DumpFlows(t, "node3") {
			switch cookie := pipeline.Cookie(f.Cookie); {
			case !pipeline.LearnedFilter().Matches(cookie):
			case !cookie.LearnedTranslation():
				replies++
			case f.Table == int(pipeline.SCTPPin.ID):
				pins++
			}
		}
		if pins == 0 {
			t.Fatalf("node3 has no learned SCTP pins (table %d)", pipeline.SCTPPin.ID)
		}
		if replies > 0 {
			return fmt.Errorf("%d learned SCTP replies left", replies)
		}
		return nil
	})
	checkAssociation("after a NetworkPolicy change")

	write(current...)
	framework.Eventually(t, programTimeout, "the association to move off "+key(gone)+" once the slice no longer lists it", func() error {
		r := association()
		if !r.Connected || r.Reply == nil {
			return fmt.Errorf("association from port %d: %s", srcPort, framework.Describe(r))
		}
		if !slices.Contains(now, r.Reply.Identity) {
			return fmt.Errorf("association from port %d still answered by %s", srcPort, r.Reply.Identity)
		}
		return nil
	})
}
