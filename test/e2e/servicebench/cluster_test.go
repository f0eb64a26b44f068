package servicebench_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// bench is the sandbox with the measured Service "probe" in namespace kovs-<sandbox>-bench:
// its 10 endpoints are pods be-0..be-9 (alternately on node1 and node2), the spare backend
// be-spare (node2) is added and removed by the samples, and the client (node1) probes.
type bench struct {
	s          *framework.Sandbox
	ns         string
	svc        *corev1.Service
	clusterIP  netip.Addr
	backends   []*corev1.Pod
	spare      *corev1.Pod
	client     framework.Client
	background int // background Services in place
}

func newBench(b *testing.B, s *framework.Sandbox) *bench {
	c := &bench{s: s, ns: "kovs-" + s.Layout.Name + "-bench"}
	s.EnsureNamespace(b, c.ns, nil)
	b.Cleanup(func() {
		_ = s.Client.CoreV1().Namespaces().Delete(context.Background(), c.ns, metav1.DeleteOptions{})
	})
	ports := []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}
	var specs []framework.PodSpec
	for i := range endpointsPerService {
		specs = append(specs, framework.PodSpec{Namespace: c.ns, Name: fmt.Sprintf("be-%d", i), Node: fmt.Sprintf("node%d", i%2+1), Ports: ports})
	}
	specs = append(specs, framework.PodSpec{Namespace: c.ns, Name: "be-spare", Node: "node2", Ports: ports},
		framework.PodSpec{Namespace: c.ns, Name: "client", Node: "node1"})
	for _, p := range specs {
		s.CreatePod(b, p)
	}
	for _, p := range specs {
		pod := s.WaitRunning(b, p.Namespace, p.Name, 90*time.Second)
		switch p.Name {
		case "be-spare":
			c.spare = pod
		case "client":
			c.client = s.PodClient(pod)
		default:
			c.backends = append(c.backends, pod)
		}
	}
	c.svc = s.CreateService(b, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: "probe"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}}})
	c.clusterIP = framework.ClusterIPs(c.svc)[0]
	c.writeProbeSlice(b, false)
	framework.Eventually(b, 30*time.Second, "the measured Service to answer through "+c.clusterIP.String()+":80", func() error {
		r := s.ProbeFrom(c.client, c.clusterIP, "80/tcp", time.Second)
		if !r.Connected || r.Reply == nil {
			return fmt.Errorf("%s", framework.Describe(r))
		}
		return nil
	})
	return c
}

// writeProbeSlice writes the measured Service's slice: its 10 backends, plus the spare.
func (c *bench) writeProbeSlice(b *testing.B, withSpare bool) {
	var eps []framework.SliceEndpoint
	for _, p := range c.backends {
		eps = append(eps, framework.ReadyEndpoint(p, c.clusterIP))
	}
	if withSpare {
		eps = append(eps, framework.ReadyEndpoint(c.spare, c.clusterIP))
	}
	c.s.ApplyEndpointSlice(b, framework.EndpointSliceFor(c.svc, "probe-1", backgroundPorts, eps))
}

// ensureBackground creates background Services (and their slices) up to n, in parallel.
func (c *bench) ensureBackground(b *testing.B, n int) {
	if n <= c.background {
		return
	}
	start := time.Now()
	if err := framework.ForEach(c.background, n, 8, c.createBackground); err != nil {
		b.Fatal(err)
	}
	b.Logf("created %d background Services with %d endpoints each in %s", n-c.background, endpointsPerService, time.Since(start).Round(time.Millisecond))
	c.background = n
}

func (c *bench) createBackground(i int) error {
	ctx := context.Background()
	svc, err := c.s.Client.CoreV1().Services(c.ns).Create(ctx, backgroundService(c.ns, i), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("background Service %d: %w", i, err)
	}
	if err != nil {
		return nil
	}
	slice := framework.EndpointSliceFor(svc, svc.Name+"-1", backgroundPorts, backgroundEndpoints(i))
	if _, err := c.s.Client.DiscoveryV1().EndpointSlices(c.ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("background EndpointSlice %d: %w", i, err)
	}
	return nil
}

// probeRun is the probers of one sample.
type probeRun struct {
	answered chan time.Time // the first time the spare answered
	cancel   context.CancelFunc
	probes   atomic.Int64
	failures atomic.Int64
	mu       sync.Mutex
	lastErr  string
}

func (r *probeRun) summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprintf("%d probes, %d failed, last failure %q", r.probes.Load(), r.failures.Load(), r.lastErr)
}

// startProbers opens new connections to the ClusterIP from the client, back to back in
// each of the probers, until cancelled; the first answer of the spare is reported.
func (c *bench) startProbers(b *testing.B) *probeRun {
	ctx, cancel := context.WithCancel(context.Background())
	run := &probeRun{answered: make(chan time.Time, 1), cancel: cancel}
	spare := c.spare.Namespace + "/" + c.spare.Name
	tgt := responder.Target{Addr: c.clusterIP, Port: responder.Port{Number: 80, Protocol: responder.TCP}}
	var once sync.Once
	for range probers {
		go func() {
			err := ns.WithNetNSPath(c.client.NetNS, func(ns.NetNS) error {
				for ctx.Err() == nil {
					r := responder.Probe(ctx, tgt, probeAttempt)
					at := time.Now()
					run.probes.Add(1)
					switch {
					case r.Reply != nil && r.Reply.Identity == spare:
						once.Do(func() { run.answered <- at })
					case r.Reply == nil && ctx.Err() == nil:
						run.failures.Add(1)
						run.mu.Lock()
						run.lastErr = framework.Describe(r)
						run.mu.Unlock()
					}
				}
				return nil
			})
			if err != nil {
				b.Error(err)
			}
		}()
	}
	return run
}

// drainProbes new connections in a row must miss the spare before it counts as removed:
// while still a backend it gets 1 in 11, so all miss it with probability (10/11)^150, 6e-7.
const drainProbes = 150

// waitSpareDrained waits until drainProbes new connections in a row miss the spare backend.
func (c *bench) waitSpareDrained(b *testing.B) {
	spare := c.spare.Namespace + "/" + c.spare.Name
	framework.Eventually(b, sampleTimeout, "the removed backend to get no new connections", func() error {
		a := c.s.Spread(c.client, c.clusterIP, "80/tcp", drainProbes, time.Second)
		if a.ByIdentity[spare] > 0 || a.Unanswered() > 0 {
			return fmt.Errorf("%s", a)
		}
		return nil
	})
}

// agentLogSize is the size of a node's kovs-agent log.
func (c *bench) agentLogSize(node string) int64 {
	return fileSize(c.s.Layout.LogDir() + "/" + node + "-kovs-agent.log")
}

// agentSyncs are the incremental flow syncs kovs-agent logged on node after offset: the
// sum of their added and deleted counts, of their took= durations, and the lines.
func (c *bench) agentSyncs(node string, offset int64) (mods int, took time.Duration, syncs []string) {
	for _, line := range linesAfter(c.s.Layout.LogDir()+"/"+node+"-kovs-agent.log", offset) {
		if !strings.Contains(line, "synced") || strings.Contains(line, "full=true") {
			continue
		}
		syncs = append(syncs, strings.TrimSpace(line))
		mods += intField(line, "added") + intField(line, "deleted")
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "took="); ok {
				d, _ := time.ParseDuration(v)
				took += d
			}
		}
	}
	return mods, took, syncs
}

// waitOVSSettled waits until node's flow and group counts stop changing (the same for 5 s)
// with at least one group per Service with endpoints, and returns them.
func (c *bench) waitOVSSettled(b *testing.B, node string) ovsCount {
	start := time.Now()
	want := c.background + 1
	var last ovsCount
	stableSince := time.Now()
	for {
		cur := c.dumpOVS(b, node).count()
		if cur.flows != last.flows || cur.groups != last.groups {
			last, stableSince = cur, time.Now()
		}
		if cur.groups >= want && time.Since(stableSince) >= 5*time.Second {
			b.Logf("%s settled with %d Services after %s", node, want, time.Since(start).Round(time.Second))
			return cur
		}
		if time.Since(start) > programTimeout {
			b.Errorf("%s: after %s, %d groups for %d Services with endpoints (want one select group each at least); %d kovs flows",
				node, programTimeout, cur.groups, want, cur.flows)
			return cur
		}
		time.Sleep(time.Second)
	}
}
