package podnetwork_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// traffic holds established sessions that echo every interval, and opens a new connection
// every interval, recording failures: what a restart does to running traffic.
type traffic struct {
	sessions []*sessionLoop
	fresh    []*freshLoop
	stop     chan struct{}
	wg       sync.WaitGroup
}

type sessionLoop struct {
	name string
	s    *responder.Session
	err  error
	n    int
}

// freshLoop opens new connections and measures the longest run of failures.
type freshLoop struct {
	name             string
	ok, failed       int
	firstFail        time.Time
	longestGap       time.Duration
	failing          bool
	lastFailureError string
}

func (c *cluster) startTraffic(t *testing.T, pairs [][2]*corev1.Pod, interval time.Duration) *traffic {
	tr := &traffic{stop: make(chan struct{})}
	for _, p := range pairs {
		from, to := p[0], p[1]
		dst := framework.PodIPs(to)[0]
		target := responder.Target{Addr: dst, Port: responder.Port{Number: 80, Protocol: responder.TCP}}
		var sess *responder.Session
		var err error
		if nerr := ns.WithNetNSPath(c.s.NetNSPath(from), func(ns.NetNS) error {
			sess, err = responder.Dial(context.Background(), target, probeTimeout)
			return nil
		}); nerr != nil {
			t.Fatal(nerr)
		}
		if err != nil {
			t.Fatalf("session %s -> %s: %v", from.Name, to.Name, err)
		}
		name := fmt.Sprintf("%s(%s)->%s(%s)", from.Name, from.Spec.NodeName, to.Name, to.Spec.NodeName)
		sl := &sessionLoop{name: name, s: sess}
		fl := &freshLoop{name: name}
		tr.sessions, tr.fresh = append(tr.sessions, sl), append(tr.fresh, fl)
		tr.wg.Add(2)
		go tr.runSession(sl, interval)
		go tr.runFresh(c, fl, from, dst, interval)
	}
	return tr
}

func (tr *traffic) runSession(sl *sessionLoop, interval time.Duration) {
	defer tr.wg.Done()
	defer sl.s.Close()
	for {
		select {
		case <-tr.stop:
			return
		case <-time.After(interval):
		}
		if err := sl.s.Echo(2 * time.Second); err != nil {
			sl.err = err
			return
		}
		sl.n++
	}
}

func (tr *traffic) runFresh(c *cluster, fl *freshLoop, from *corev1.Pod, dst netip.Addr, interval time.Duration) {
	defer tr.wg.Done()
	for {
		select {
		case <-tr.stop:
			fl.endGap(time.Now())
			return
		case <-time.After(interval):
		}
		now := time.Now()
		r := c.s.Probe(from, dst, "80/tcp", time.Second)
		if r.Connected {
			fl.ok++
			fl.endGap(time.Now())
			continue
		}
		fl.failed++
		fl.lastFailureError = framework.Describe(r)
		if !fl.failing {
			fl.failing, fl.firstFail = true, now
		}
	}
}

func (fl *freshLoop) endGap(now time.Time) {
	if fl.failing {
		fl.longestGap = max(fl.longestGap, now.Sub(fl.firstFail))
		fl.failing = false
	}
}

func (tr *traffic) finish() {
	close(tr.stop)
	tr.wg.Wait()
}

// checkAgentRestart restarts kovs-agent on two nodes while sessions cross them: no
// established connection may break; the gap for new connections is measured.
func (c *cluster) checkAgentRestart(t *testing.T) {
	a, b, cc, d := c.pods["a"], c.pods["b"], c.pods["c"], c.pods["d"]
	// Every pod of x is isolated, reachable only from x: the restarts must keep both the
	// allowed traffic flowing and the denied traffic denied.
	remove := c.isolateNamespaceX(t)
	defer remove()
	tr := c.startTraffic(t, [][2]*corev1.Pod{{a, cc}, {d, a}, {a, b}, {cc, d}}, 100*time.Millisecond)
	time.Sleep(time.Second)
	for _, node := range []string{"node1", "node2"} {
		start := time.Now()
		if _, err := c.s.Layout.Restart(node + "-kovs-agent"); err != nil {
			t.Fatal(err)
		}
		c.waitAgentReady(t, node, start)
		t.Logf("kovs-agent on %s restarted and ready again in %s", node, time.Since(start).Round(time.Millisecond))
	}
	time.Sleep(2 * time.Second)
	tr.finish()
	c.expectDenied(t, c.hosts["node2"], framework.PodIPs(a)[0], "after the restarts")
	for _, s := range tr.sessions {
		if s.err != nil {
			t.Errorf("established connection %s broke after %d round trips: %v", s.name, s.n, s.err)
		}
	}
	for _, f := range tr.fresh {
		t.Logf("new connections %s during the restarts: %d ok, %d failed, longest gap %s", f.name, f.ok, f.failed, f.longestGap)
		if f.ok == 0 {
			t.Errorf("no new connection %s succeeded: %s", f.name, f.lastFailureError)
		}
	}
}

// waitAgentReady waits until the node's agent rewrote the CNI config after start.
func (c *cluster) waitAgentReady(t *testing.T, node string, since time.Time) {
	framework.Eventually(t, 60*time.Second, "kovs-agent on "+node+" ready", func() error {
		return fileNewerThan(c.s.Layout.CNIConfDir(node)+"/10-kovs.conflist", since)
	})
}

// checkVswitchdRestart restarts ovs-vswitchd on node2 (every flow is lost) and measures
// how long until the agent has repaired it and cross-node traffic flows again.
func (c *cluster) checkVswitchdRestart(t *testing.T) {
	a, cc := c.pods["a"], c.pods["c"]
	dst := framework.PodIPs(cc)[0]
	start := time.Now()
	if _, err := c.s.Layout.Restart("node2-ovs-vswitchd"); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, "a -> c through node2's restarted ovs-vswitchd", func() error {
		if r := c.s.Probe(a, dst, "80/tcp", time.Second); !r.Connected {
			return fmt.Errorf("%s", framework.Describe(r))
		}
		return nil
	})
	t.Logf("ovs-vswitchd on node2 restarted; cross-node traffic repaired after %s", time.Since(start).Round(time.Millisecond))
	c.runProbes(t, []probeCase{{name: "c->a after repair", from: cc, to: framework.PodIPs(a)[0], port: "80/tcp"}})
}

// isolateNamespaceX applies a NetworkPolicy that lets x's pods receive only from x, and
// waits until node2 can no longer reach node1's pod a; it returns the undo.
func (c *cluster) isolateNamespaceX(t *testing.T) func() {
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "allow-same-namespace"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}}}},
	}
	ctx := context.Background()
	if _, err := c.s.Client.NetworkingV1().NetworkPolicies("x").Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "the policy enforced", func() error {
		if r := c.s.Probe(c.hosts["node2"], framework.PodIPs(c.pods["a"])[0], "80/tcp", time.Second); r.Connected {
			return fmt.Errorf("node2 still reaches a")
		}
		return nil
	})
	return func() {
		_ = c.s.Client.NetworkingV1().NetworkPolicies("x").Delete(ctx, np.Name, metav1.DeleteOptions{})
		framework.Eventually(t, 30*time.Second, "the policy removed", func() error {
			if r := c.s.Probe(c.hosts["node2"], framework.PodIPs(c.pods["a"])[0], "80/tcp", time.Second); !r.Connected {
				return fmt.Errorf("node2 cannot reach a: %s", framework.Describe(r))
			}
			return nil
		})
	}
}

func (c *cluster) expectDenied(t *testing.T, from *corev1.Pod, to netip.Addr, when string) {
	if r := c.s.Probe(from, to, "80/tcp", time.Second); r.Connected {
		t.Errorf("%s: %s reaches %s although a NetworkPolicy denies it", when, from.Name, to)
	}
}
