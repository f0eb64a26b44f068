package services_test

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

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
// to the ClusterIP from a pod and to node1's NodePort from node3's client pod. The
// NodePort flow starts before node1's agent knows the Service (it is stopped while the
// Service is created): node1 itself refuses it, an entry in node1's conntrack without
// NAT. While the Service has no endpoint both flows are rejected; once web-1 is its
// endpoint both reach web-1 (the ClusterIP flow's entry began untranslated, and so did
// the NodePort flow's on node1's host: seen in CI, refused for 30 s after the endpoint
// came, before the agent deleted such entries); once web-2 replaces web-1 both reach
// web-2, though web-1 still runs and would answer a stale entry.
func (c *svcCluster) testUDPFlowFollowsEndpoints(t *testing.T) {
	name := "udpflow"
	ns := c.namespace(t, name)
	resume := c.s.Pause(t, "node1-kovs-agent")
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

	// A busy flow (a datagram a millisecond) while the first endpoint comes: its packets
	// that follow the entry made without endpoints go to the host, and one of them may be
	// on its way back when the entry is deleted.
	busy := flow{"busy ClusterIP flow", ip, "53/udp", 50055}
	if r := send(flows[1]); !r.Refused {
		resume()
		t.Fatalf("%s before node1's agent knew the Service: not refused by node1 (nothing listens there): %s", flows[1].what, framework.Describe(r))
	}
	resume()
	for _, f := range flows {
		framework.Eventually(t, programTimeout, f.what+" to be rejected (no endpoints)", func() error {
			if r := send(f); !r.Refused {
				return fmt.Errorf("%s not refused: %s", f.what, framework.Describe(r))
			}
			return nil
		})
	}
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
		var flood func(stop bool) []string
		if step.web == c.web[0] {
			flood = c.udpFlood(t, from, netip.AddrPortFrom(busy.addr, 53), busy.src)
		}
		write(eps...)
		t.Logf("endpoints now %s (was %s)", key(step.web), step.from)
		if flood != nil {
			framework.Eventually(t, programTimeout, busy.what+" to reach "+step.why, func() error {
				if len(flood(false)) == 0 {
					return fmt.Errorf("%s from port %d: no answer yet", busy.what, busy.src)
				}
				return nil
			})
			t.Logf("%s answered by %v while it sent a datagram a millisecond", busy.what, flood(true))
			stays(busy, key(step.web))
		}
		for _, f := range flows {
			framework.Eventually(t, programTimeout, f.what+" to reach "+step.why, func() error { return reaches(f, key(step.web)) })
			stays(f, key(step.web))
		}
	}
}

// udpFlood sends a datagram a millisecond from the pod's port src to dst; the returned
// function reports who answered so far (by identity, once each), and with stop ends the
// flood first.
func (c *svcCluster) udpFlood(t *testing.T, from *corev1.Pod, dst netip.AddrPort, src uint16) func(stop bool) []string {
	t.Helper()
	var conn *net.UDPConn
	err := ns.WithNetNSPath(c.s.NetNSPath(from), func(ns.NetNS) error {
		var err error
		conn, err = net.DialUDP("udp", &net.UDPAddr{Port: int(src)}, net.UDPAddrFromAddrPort(dst))
		return err
	})
	if err != nil {
		t.Fatalf("flood socket from port %d to %s: %v", src, dst, err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string]bool{}
	wg.Add(2)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				conn.Write([]byte("kovs-probe\n")) // errors (ICMP port unreachable) are expected while rejected
			}
		}
	}()
	go func() {
		defer wg.Done()
		buf := make([]byte, 2048)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				select {
				case <-done:
					return
				default:
					continue // a reported ICMP error
				}
			}
			if l, err := responder.ParseLine(string(buf[:n])); err == nil {
				mu.Lock()
				seen[l.Identity] = true
				mu.Unlock()
			}
		}
	}()
	var once sync.Once
	answers := func(stop bool) []string {
		if stop {
			once.Do(func() {
				close(done)
				conn.Close()
				wg.Wait()
			})
		}
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for id := range seen {
			out = append(out, id)
		}
		return out
	}
	t.Cleanup(func() { answers(true) })
	return answers
}
