package podnetwork_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

const (
	probeTimeout = 3 * time.Second
	podTimeout   = 60 * time.Second
	hostPort     = 8080
	nodes        = 3
)

// cluster is a sandbox with a standard set of pods: in namespace "x", pods a and b on
// node1, c on node2, d on node3; and a hostNetwork pod h<N> on every node serving 8080.
type cluster struct {
	s     *framework.Sandbox
	pods  map[string]*corev1.Pod // by name
	hosts map[string]*corev1.Pod // by node
}

func newCluster(t *testing.T, s *framework.Sandbox) *cluster {
	c := &cluster{s: s, pods: map[string]*corev1.Pod{}, hosts: map[string]*corev1.Pod{}}
	placement := map[string]string{"a": "node1", "b": "node1", "c": "node2", "d": "node3"}
	for name, node := range placement {
		s.CreatePod(t, framework.PodSpec{Namespace: "x", Name: name, Node: node})
	}
	for i := 1; i <= nodes; i++ {
		node := fmt.Sprintf("node%d", i)
		s.CreatePod(t, framework.PodSpec{Name: "h" + node, Node: node, HostNetwork: true,
			Ports: []corev1.ContainerPort{{ContainerPort: hostPort}, {ContainerPort: hostPort, Protocol: corev1.ProtocolUDP}}})
	}
	for name := range placement {
		c.pods[name] = s.WaitRunning(t, "x", name, podTimeout)
	}
	for i := 1; i <= nodes; i++ {
		node := fmt.Sprintf("node%d", i)
		c.hosts[node] = s.WaitRunning(t, "default", "h"+node, podTimeout)
	}
	return c
}

// probeCase is one expected connection.
type probeCase struct {
	name   string
	from   *corev1.Pod
	to     netip.Addr
	port   string
	expect func(seen netip.Addr) error // nil: only "connected" is required
}

// runProbes runs cases in parallel and reports every failure.
func (c *cluster) runProbes(t *testing.T, cases []probeCase) {
	t.Helper()
	if len(cases) == 0 {
		t.Fatal("no probes to run: the pods have no addresses?")
	}
	var mu sync.Mutex
	var failures []string
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, pc := range cases {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			res := c.s.Probe(pc.from, pc.to, pc.port, probeTimeout)
			var problem string
			switch {
			case !res.Connected || res.Reply == nil:
				problem = framework.Describe(res)
			case pc.expect != nil:
				if err := pc.expect(res.Reply.Peer.Addr()); err != nil {
					problem = err.Error()
				}
			}
			if problem != "" {
				mu.Lock()
				failures = append(failures, fmt.Sprintf("%s -> %s %s: %s", pc.name, pc.to, pc.port, problem))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Errorf("%d of %d probes failed:\n  %s", len(failures), len(cases), strings.Join(failures, "\n  "))
	}
}

func sameFamily(ips []netip.Addr, like netip.Addr) (netip.Addr, bool) {
	for _, ip := range ips {
		if ip.Is4() == like.Is4() {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// gateway is the node's gateway address of like's family.
func (c *cluster) gateway(t *testing.T, node string, like netip.Addr) netip.Addr {
	n, err := c.s.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ann, err := ipam.ParseNodeSubnetsAnnotation(n.Annotations[ipam.NodeSubnetsAnnotationKey])
	if err != nil {
		t.Fatalf("node %s subnets: %v", node, err)
	}
	for _, b := range ann.Blocks() {
		if b.Addr().Is4() == like.Is4() {
			return b.Masked().Addr().Next()
		}
	}
	t.Fatalf("node %s has no block of %s's family", node, like)
	return netip.Addr{}
}

// nodeAddresses are the addresses a node may legitimately use as a source: its
// InternalIPs and its gateway addresses (the first address of each of its pod blocks).
func (c *cluster) nodeAddresses(t *testing.T, node string) []netip.Addr {
	n, err := c.s.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Addr
	for _, a := range n.Status.Addresses {
		if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP {
			out = append(out, ip)
		}
	}
	ann, err := ipam.ParseNodeSubnetsAnnotation(n.Annotations[ipam.NodeSubnetsAnnotationKey])
	if err != nil {
		t.Fatalf("node %s subnets: %v", node, err)
	}
	for _, b := range ann.Blocks() {
		out = append(out, b.Masked().Addr().Next())
	}
	return out
}

func expectSource(want netip.Addr) func(netip.Addr) error {
	return func(seen netip.Addr) error {
		if seen != want {
			return fmt.Errorf("receiver saw source %s, want %s (no NAT)", seen, want)
		}
		return nil
	}
}

func expectOneOf(allowed []netip.Addr) func(netip.Addr) error {
	return func(seen netip.Addr) error {
		for _, a := range allowed {
			if a == seen {
				return nil
			}
		}
		return fmt.Errorf("receiver saw source %s, not one of the node's own addresses %v", seen, allowed)
	}
}
