package edges_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/egress"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

const connectSamples = 200

// BenchmarkMasqueradeConnect measures, on a 2-node IPv4 sandbox, the setup of a TCP
// connection from a pod on node1 to the external host (connect and the responder's line)
// masqueraded to node1's address, against the same connection untranslated: to the
// external host's no-masquerade address, to which the benchmark gives the external host a
// route to the pod CIDR via node1 (the tests run without it). The two kinds alternate, 200
// samples each, so load on the shared machine weighs on both alike. Reported: median and
// p99 (nearest rank) of each, in µs, and their ratio at the median. Run with -benchtime 1x.
func BenchmarkMasqueradeConnect(b *testing.B) {
	env := framework.Require(b)
	s := framework.Up(b, env, "--nodes", "2", "--ip-family", "ipv4", "--no-masquerade-cidrs", noMasquerade)
	s.CreatePod(b, framework.PodSpec{Namespace: "x", Name: "client", Node: "node1"})
	pod := s.WaitRunning(b, "x", "client", podTimeout)
	node1 := s.NodeIPs(b, "node1")[0]
	if out, err := exec.Command("ip", "netns", "exec", s.Layout.ExternalNetNS(), "ip", "route", "add", "10.244.0.0/16", "via", node1.String()).CombinedOutput(); err != nil {
		b.Fatalf("route the pod CIDR on the external host: %v: %s", err, out)
	}
	connect := func(kind string) time.Duration {
		to := sandbox.ExternalV4
		if kind == "untranslated" {
			to = sandbox.ExternalRoutedV4
		}
		start := time.Now()
		r := s.Probe(pod, to, "80/tcp", probeTimeout)
		took := time.Since(start)
		if !r.Connected || r.Reply == nil {
			b.Fatalf("%s connection to %s: %s", kind, to, framework.Describe(r))
		}
		return took
	}
	connect("masqueraded")
	connect("untranslated")
	var masq, plain []time.Duration
	b.ResetTimer()
	for range b.N {
		for range connectSamples {
			masq = append(masq, connect("masqueraded"))
			plain = append(plain, connect("untranslated"))
		}
	}
	b.StopTimer()
	m50, m99 := quantiles(masq)
	p50, p99 := quantiles(plain)
	b.ReportMetric(float64(m50.Microseconds()), "masq-p50-µs")
	b.ReportMetric(float64(m99.Microseconds()), "masq-p99-µs")
	b.ReportMetric(float64(p50.Microseconds()), "plain-p50-µs")
	b.ReportMetric(float64(p99.Microseconds()), "plain-p99-µs")
	b.ReportMetric(float64(m50)/float64(p50), "masq/plain-p50")
	b.Log(fmt.Sprintf("TCP connection setup to the external host, %d samples each: masqueraded p50 %s p99 %s; untranslated p50 %s p99 %s; ratio at p50 %.2f",
		len(masq), m50, m99, p50, p99, float64(m50)/float64(p50)))
}

// quantiles are the median and p99 (nearest rank) of d.
func quantiles(d []time.Duration) (p50, p99 time.Duration) {
	s := slices.Sorted(slices.Values(d))
	rank := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))+0.5)-1)] }
	return rank(0.50), rank(0.99)
}

const failovers = 10

// BenchmarkEgressFailover measures, on a 3-node IPv4 sandbox, Egress failover: an Egress
// selecting x/a on node1, held by node2 or node3. Each round kills the holder's agent and
// OVS (SIGKILL) and times how long x/a's new connections to the external host fail until
// they succeed again, with the egress IP (a connection leaving with another source fails
// the run); then the killed node's OVS and agent start again and the next round waits
// for its heartbeat before killing the other one. Reported: median and maximum over 10
// failovers, in ms. Run with -benchtime 1x.
func BenchmarkEgressFailover(b *testing.B) {
	env := framework.Require(b)
	s := framework.Up(b, env, "--nodes", "3", "--ip-family", "ipv4")
	c := &edges{s: s, family: "ipv4", pods: map[string]*corev1.Pod{}}
	s.CreatePod(b, framework.PodSpec{Namespace: "x", Name: "a", Node: "node1", Labels: map[string]string{"pod": "a"}})
	c.pods["a"] = s.WaitRunning(b, "x", "a", podTimeout)
	holder := c.applyEgress(b)
	var took []time.Duration
	flaps := 0
	b.ResetTimer()
	for range b.N {
		for i := range failovers {
			if unsettled := c.settleEgress(b); unsettled > 0 {
				flaps += unsettled
				b.Logf("before failover %d: %d of x/a's connections failed before three in a row reached the external host with the egress IP", i+1, unsettled)
			}
			d, failed, next := c.failover(b, holder)
			took = append(took, d)
			b.Logf("failover %d: %s -> %s after %s (%d failed attempts)", i+1, holder, next, d.Round(time.Millisecond), failed)
			c.restore(b, holder)
			holder = next
		}
	}
	b.StopTimer()
	p50, _ := quantiles(took)
	worst := slices.Max(took)
	b.ReportMetric(float64(p50.Milliseconds()), "failover-p50-ms")
	b.ReportMetric(float64(worst.Milliseconds()), "failover-max-ms")
	b.ReportMetric(float64(flaps), "unsettled-probes")
	b.Logf("Egress failover over %d rounds: p50 %s, max %s", len(took), p50.Round(time.Millisecond), worst.Round(time.Millisecond))
}

// restore starts node's OVS again, then (once br-int's management socket answers, as the
// agent's DaemonSet would restart it until then) its agent, and waits until the node is
// Ready and its heartbeat Lease renewed since.
func (c *edges) restore(b testing.TB, node string) {
	since := time.Now()
	if _, err := c.s.Layout.Start(node + "-ovs-vswitchd"); err != nil {
		b.Fatal(err)
	}
	mgmt := filepath.Join(c.s.Layout.OVSDir(node), "br-int.mgmt")
	framework.Eventually(b, 30*time.Second, node+"'s br-int back", func() error {
		conn, err := net.Dial("unix", mgmt)
		if err != nil {
			return err
		}
		return conn.Close()
	})
	if _, err := c.s.Layout.Start(node + "-kovs-agent"); err != nil {
		b.Fatal(err)
	}
	framework.Eventually(b, 90*time.Second, node+" back with a fresh heartbeat", func() error {
		n, err := c.s.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionTrue {
				return fmt.Errorf("node %s not Ready: %s", node, cond.Message)
			}
		}
		l, err := c.s.Client.CoordinationV1().Leases("kube-system").Get(context.Background(), egress.HeartbeatLease(node), metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.RenewTime == nil || l.Spec.RenewTime.Time.Before(since) {
			return fmt.Errorf("lease %s not renewed since the restart", l.Name)
		}
		return nil
	})
}

// settleEgress waits until three of x/a's connections in a row reach the external host
// with the egress IP (each failover starts from a steady path) and returns how many failed
// first. Right after a former holder came back, a connection was once seen to connect and
// read nothing (docs/egress.md, cause not known): the benchmark reports such probes
// (unsettled-probes) instead of timing the next failover from a path that is not steady.
func (c *edges) settleEgress(b testing.TB) int {
	a := c.pods["a"]
	ip := framework.PodIPs(a)[0]
	failed, ok := 0, 0
	deadline := time.Now().Add(30 * time.Second)
	for ok < 3 {
		if time.Now().After(deadline) {
			b.Fatalf("x/a's connections to the external host did not settle in 30s (%d failed)", failed)
		}
		r := c.s.Probe(a, external(ip), "80/tcp", time.Second)
		if r.Connected && r.Reply != nil && r.Reply.Peer.Addr() == egressOf(ip) {
			ok++
			continue
		}
		failed, ok = failed+1, 0
		b.Logf("unsettled: x/a -> %s: %s", external(ip), framework.Describe(r))
	}
	return failed
}
