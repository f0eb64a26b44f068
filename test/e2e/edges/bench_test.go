package edges_test

import (
	"fmt"
	"os/exec"
	"slices"
	"testing"
	"time"

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
