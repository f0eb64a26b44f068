package services_test

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// udpFlowPackets is how many more packets of a flow must reach its endpoint once it has
// moved there.
const udpFlowPackets = 5

// testUDPFlowFollowsEndpoints: a UDP client that keeps sending from one port is one
// conntrack entry, refreshed by every packet, which br-int's flows never see again; it
// must follow the Service's endpoints as with kube-proxy (which deletes such entries: the
// upstream "Conntrack should be able to preserve UDP traffic when ..." tests). Two flows,
// to the ClusterIP from a pod and to node1's NodePort from node3's client pod: while the
// Service has no endpoint the ClusterIP flow is rejected; once web-1 is its endpoint both
// reach web-1 (the ClusterIP flow's entry began untranslated); once web-2 replaces web-1
// both reach web-2, though web-1 still runs and would answer a stale entry.
func (c *svcCluster) testUDPFlowFollowsEndpoints(t *testing.T) {
	name := "udpflow"
	ns := c.namespace(t, name)
	svc := c.service(t, ns, name, nil, []corev1.ServicePort{svcPort("dns", 53, intstr.FromInt32(5353), corev1.ProtocolUDP)},
		func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })
	ports := []discoveryv1.EndpointPort{framework.EndpointPort("dns", 5353, corev1.ProtocolUDP)}
	write := func(eps ...framework.SliceEndpoint) {
		c.s.ApplyEndpointSlice(t, framework.EndpointSliceFor(svc, name+"-1", ports, eps))
	}
	ip := framework.ClusterIPs(svc)[0]
	from := c.clients["node3"]
	type flow struct {
		what string
		addr netip.Addr
		port string
		src  uint16
	}
	flows := []flow{
		{"ClusterIP flow", ip, "53/udp", 50053},
		{"NodePort flow to node1", c.nodeIP(t, "node1", ip), port(nodePort(t, svc, "dns"), corev1.ProtocolUDP), 50054},
	}
	send := func(f flow) responder.Result { return c.s.ProbeFromPort(from, f.addr, f.port, f.src, probeTimeout) }
	reaches := func(f flow, want string) error {
		r := send(f)
		if !r.Connected || r.Reply == nil {
			return fmt.Errorf("%s from port %d to %s: %s", f.what, f.src, target(f.addr, f.port), framework.Describe(r))
		}
		if r.Reply.Identity != want {
			return fmt.Errorf("%s from port %d to %s answered by %s, want %s", f.what, f.src, target(f.addr, f.port), r.Reply.Identity, want)
		}
		return nil
	}
	stays := func(f flow, want string) {
		t.Helper()
		for i := range udpFlowPackets {
			if err := reaches(f, want); err != nil {
				t.Errorf("packet %d after it moved: %v", i+1, err)
			}
		}
	}

	framework.Eventually(t, programTimeout, "the ClusterIP flow to be rejected (no endpoints)", func() error {
		if r := send(flows[0]); !r.Refused {
			return fmt.Errorf("%s not refused: %s", flows[0].what, framework.Describe(r))
		}
		return nil
	})
	for _, step := range []struct {
		web  *corev1.Pod
		why  string
		eps  []*corev1.Pod
		from string
	}{
		{c.web[0], "its first endpoint", []*corev1.Pod{c.web[0]}, "no endpoint"},
		{c.web[1], "the endpoint that replaced " + key(c.web[0]), []*corev1.Pod{c.web[1]}, key(c.web[0])},
	} {
		var eps []framework.SliceEndpoint
		for _, p := range step.eps {
			eps = append(eps, framework.ReadyEndpoint(p, ip))
		}
		write(eps...)
		t.Logf("endpoints now %s (was %s)", key(step.web), step.from)
		for _, f := range flows {
			framework.Eventually(t, programTimeout, f.what+" to reach "+step.why, func() error { return reaches(f, key(step.web)) })
			stays(f, key(step.web))
		}
	}
}
