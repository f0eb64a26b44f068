package podnetwork_test

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// traffic holds established sessions that echo every interval, opens a new connection
// every interval on each allowed pair, and probes each denied pair every interval: what a
// restart does to running traffic and to policy.
type traffic struct {
	sessions []*sessionLoop
	fresh    []*freshLoop
	stop     chan struct{}
	wg       sync.WaitGroup
	// mu guards the loops' counts, which await reads while they run.
	mu sync.Mutex
	// echoTimeout is how long a session's echo may take before the session counts as
	// broken; 0 is 2 s.
	echoTimeout time.Duration
}

type sessionLoop struct {
	name string
	s    *responder.Session
	err  error
	n    int
}

// freshLoop opens new connections on one pair. On an allowed pair it counts the ones that
// failed and measures the longest run of failures. On a denied pair (denied) a probe is
// denied (ok) only on evidence: it got no answer and the destination's deny flow counted
// a packet meanwhile (deny reads it). A probe that connected or failed otherwise counts as
// a failure; one that got no answer without the deny counting it is silent, a failure
// too unless it fell in a quiet span (the switch not handling packets) or the deny flow
// was replaced while it ran (replaced): silence is no proof of a drop.
type freshLoop struct {
	name       string
	denied     bool
	deny       func() (framework.DenyCount, error)
	evidence   framework.DeniedTally // of a denied pair's probes that got no answer
	ok, failed int
	failures   []string // the first few, with their time
	firstFail  time.Time
	longestGap time.Duration
	failing    bool
}

const (
	keptFailures = 10
	// deniedProbeTimeout is how long a probe of a denied pair waits for the answer that
	// must not come.
	deniedProbeTimeout = 250 * time.Millisecond
)

// pair is a connection the traffic makes; denied when policy must drop it.
type pair struct {
	from, to *corev1.Pod
	denied   bool
}

func (c *cluster) startTraffic(t *testing.T, pairs []pair, interval time.Duration) *traffic {
	return c.startTrafficEcho(t, pairs, interval, 0)
}

// startTrafficEcho is startTraffic whose sessions wait up to echoTimeout for each echo:
// through a pause TCP retransmits until the path is back, and a session that carries on
// after it has survived it.
func (c *cluster) startTrafficEcho(t *testing.T, pairs []pair, interval, echoTimeout time.Duration) *traffic {
	tr := &traffic{stop: make(chan struct{}), echoTimeout: echoTimeout}
	for _, p := range pairs {
		dst := framework.PodIPs(p.to)[0]
		name := fmt.Sprintf("%s(%s)->%s(%s)", p.from.Name, p.from.Spec.NodeName, p.to.Name, p.to.Spec.NodeName)
		fl := &freshLoop{name: name, denied: p.denied}
		if p.denied {
			fl.deny = c.s.PodDenyPackets(p.to.Spec.NodeName, p.to.Namespace, p.to.Name)
		}
		tr.fresh = append(tr.fresh, fl)
		tr.wg.Add(1)
		go tr.runFresh(c, fl, p.from, dst, interval)
		if p.denied {
			continue
		}
		sl := &sessionLoop{name: name, s: c.dial(t, p.from, dst)}
		tr.sessions = append(tr.sessions, sl)
		tr.wg.Add(1)
		go tr.runSession(sl, interval)
	}
	return tr
}

// dial opens a TCP session from a pod to dst:80.
func (c *cluster) dial(t *testing.T, from *corev1.Pod, dst netip.Addr) *responder.Session {
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
		t.Fatalf("session %s -> %s: %v", from.Name, dst, err)
	}
	return sess
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
		timeout := tr.echoTimeout
		if timeout == 0 {
			timeout = 2 * time.Second
		}
		err := sl.s.Echo(timeout)
		tr.mu.Lock()
		if err != nil {
			sl.err = err
		} else {
			sl.n++
		}
		tr.mu.Unlock()
		if err != nil {
			return
		}
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
		if fl.denied {
			tr.probeDenied(c, fl, from, dst, now)
			continue
		}
		r := c.s.Probe(from, dst, "80/tcp", time.Second)
		tr.mu.Lock()
		fl.record(now, r, r.Connected && r.Reply != nil)
		tr.mu.Unlock()
	}
}

// probeDenied probes a denied pair between reads of the destination's deny flow
// (framework.ProbeDenied); the loop's next probe starts only once this one is judged.
func (tr *traffic) probeDenied(c *cluster, fl *freshLoop, from *corev1.Pod, dst netip.Addr, now time.Time) {
	r, denied, replaced, why := framework.ProbeDenied(fl.deny, func() responder.Result {
		return c.s.Probe(from, dst, "80/tcp", deniedProbeTimeout) // a denied probe waits it out: keep them frequent
	})
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !r.TimedOut {
		fl.evidence.LetThrough++
		fl.record(now, r, false)
		return
	}
	fl.evidence.Add(now, time.Now(), denied, replaced, why)
	if denied {
		fl.ok++
	}
}

// quietFrom opens, on every denied pair, a span in which the switch handles no packets
// (a restart) and its probes may go unanswered without evidence; quietUntil closes it, at
// the signal that the switch is repaired.
func (tr *traffic) quietFrom(at time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, f := range tr.fresh {
		f.evidence.QuietFrom(at)
	}
}

func (tr *traffic) quietUntil(at time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, f := range tr.fresh {
		f.evidence.QuietUntil(at)
	}
}

// record counts one probe; good is whether it went as it must.
func (fl *freshLoop) record(at time.Time, r responder.Result, good bool) {
	if good {
		fl.ok++
		fl.endGap(time.Now())
		return
	}
	fl.failed++
	if len(fl.failures) < keptFailures {
		fl.failures = append(fl.failures, at.Format("15:04:05.000")+" "+framework.Describe(r))
	}
	if !fl.failing {
		fl.failing, fl.firstFail = true, at
	}
}

func (fl *freshLoop) endGap(now time.Time) {
	if fl.failing {
		fl.longestGap = max(fl.longestGap, now.Sub(fl.firstFail))
		fl.failing = false
	}
}

// rounds is how many rounds each loop has done so far, sessions first; a broken session
// (which check reports) counts as done for good.
func (tr *traffic) rounds() []int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []int
	for _, s := range tr.sessions {
		n := s.n
		if s.err != nil {
			n = int(^uint(0) >> 1)
		}
		out = append(out, n)
	}
	for _, f := range tr.fresh {
		n := f.ok + f.failed
		if f.denied {
			n = f.failed + f.evidence.Rounds() // ok counts only those denied on evidence
		}
		out = append(out, n)
	}
	return out
}

// await waits until every loop has done n more rounds than when it is called: the
// traffic ran through the moment the caller means (the time after a restart), however
// slow the machine, rather than for a time that a loaded machine may spend elsewhere.
func (tr *traffic) await(t *testing.T, n int, what string) {
	t.Helper()
	start := tr.rounds()
	framework.Eventually(t, 60*time.Second, fmt.Sprintf("%d rounds of every pair's traffic %s", n, what), func() error {
		now := tr.rounds()
		for i := range start {
			if now[i]-start[i] < n {
				return fmt.Errorf("%s: %d rounds of %d", tr.loopName(i), now[i]-start[i], n)
			}
		}
		return nil
	})
}

func (tr *traffic) loopName(i int) string {
	if i < len(tr.sessions) {
		return "session " + tr.sessions[i].name
	}
	return "new connections " + tr.fresh[i-len(tr.sessions)].name
}

func (tr *traffic) finish() {
	close(tr.stop)
	tr.wg.Wait()
}

// check fails the test for every broken session and every failed probe, and logs the
// counts; failures are what the restart cost, and none is acceptable.
func (tr *traffic) check(t *testing.T, during string) {
	t.Helper()
	for _, s := range tr.sessions {
		if s.err != nil {
			t.Errorf("%s: established connection %s broke after %d round trips: %v", during, s.name, s.n, s.err)
		}
	}
	for _, f := range tr.fresh {
		kind := "new connections"
		if f.denied {
			kind = "probes of the denied pair"
			f.evidence.Check(t, f.name, during)
		} else {
			t.Logf("%s %s during %s: %d as they must be, %d not, longest run of failures %s", kind, f.name, during, f.ok, f.failed, f.longestGap)
		}
		if f.failed > 0 {
			t.Errorf("%s: %d of %d %s %s failed (the first %d):\n  %s", during, f.failed, f.ok+f.failed, kind, f.name,
				len(f.failures), strings.Join(f.failures, "\n  "))
		}
	}
}

// checkAgentRestart restarts kovs-agent on two nodes while sessions cross them, under a
// NetworkPolicy: no established connection may break, no new connection may fail, and
// the denied pair must stay denied throughout.
func (c *cluster) checkAgentRestart(t *testing.T) {
	a, b, cc, d := c.pods["a"], c.pods["b"], c.pods["c"], c.pods["d"]
	// Every pod of x is isolated, reachable only from x: the restarts must keep both the
	// allowed traffic flowing and the denied traffic denied.
	remove := c.isolateNamespaceX(t)
	defer remove()
	tr := c.startTraffic(t, []pair{{from: a, to: cc}, {from: d, to: a}, {from: a, to: b}, {from: cc, to: d},
		{from: c.hosts["node2"], to: a, denied: true}}, 100*time.Millisecond)
	tr.await(t, 3, "before the restarts")
	for _, node := range []string{"node1", "node2"} {
		start := time.Now()
		if _, err := c.s.Layout.Restart(node + "-kovs-agent"); err != nil {
			t.Fatal(err)
		}
		c.waitAgentReady(t, node, start)
		t.Logf("kovs-agent on %s restarted and ready again in %s", node, time.Since(start).Round(time.Millisecond))
	}
	tr.await(t, 10, "after the restarts")
	tr.finish()
	tr.check(t, "the agent restarts")
}

// waitAgentReady waits until the node's agent rewrote the CNI config after start.
func (c *cluster) waitAgentReady(t *testing.T, node string, since time.Time) {
	framework.Eventually(t, 60*time.Second, "kovs-agent on "+node+" ready", func() error {
		return fileNewerThan(c.s.Layout.CNIConfDir(node)+"/10-kovs.conflist", since)
	})
}

// checkVswitchdRestart restarts ovs-vswitchd on node2 (every flow is lost) under a
// NetworkPolicy and measures how long until the agent has repaired it and cross-node
// traffic flows again. A pair the policy denies, whose enforcement is on node2, is probed
// throughout: it must never connect, neither while the switch is empty nor while the
// agent reinstalls its flows. Once repaired, every new connection must succeed.
func (c *cluster) checkVswitchdRestart(t *testing.T) {
	a, cc := c.pods["a"], c.pods["c"]
	remove := c.isolateNamespaceX(t)
	defer remove()
	denied := c.startTraffic(t, []pair{{from: c.hosts["node1"], to: cc, denied: true}}, 50*time.Millisecond)
	denied.await(t, 3, "before the restart")
	dst := framework.PodIPs(cc)[0]
	start := time.Now()
	denied.quietFrom(start)
	if _, err := c.s.Layout.Restart("node2-ovs-vswitchd"); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, "a -> c through node2's restarted ovs-vswitchd", func() error {
		if r := c.s.Probe(a, dst, "80/tcp", time.Second); !r.Connected {
			return fmt.Errorf("%s", framework.Describe(r))
		}
		return nil
	})
	denied.quietUntil(time.Now())
	t.Logf("ovs-vswitchd on node2 restarted; cross-node traffic repaired after %s", time.Since(start).Round(time.Millisecond))
	after := c.startTraffic(t, []pair{{from: a, to: cc}, {from: cc, to: a}}, 100*time.Millisecond)
	after.await(t, 20, "after the repair")
	after.finish()
	denied.finish()
	after.check(t, "the 20 rounds after the repair")
	denied.check(t, "the ovs-vswitchd restart")
}

// checkAgentFailsClosed restarts node1's agent while kovs-controller is unreachable from
// node1, past the agent's wait for the first NetworkPolicy snapshot (30 s): the agent then
// programs its pods pending, closed both ways (fail closed). A pair the policy denies must
// stay denied throughout, and node1's pods must be closed to new connections until the
// controller is reachable again and the policy is back.
func (c *cluster) checkAgentFailsClosed(t *testing.T) {
	a, cc := c.pods["a"], c.pods["c"]
	remove := c.isolateNamespaceX(t)
	defer remove()
	denied := c.startTraffic(t, []pair{{from: c.hosts["node2"], to: a, denied: true}}, 100*time.Millisecond)
	unblock := c.blockController(t, "node1")
	defer unblock()
	start := time.Now()
	if _, err := c.s.Layout.Restart("node1-kovs-agent"); err != nil {
		t.Fatal(err)
	}
	const policyWait = 30 * time.Second // kovs-agent's PolicyWait (not a flag)
	c.waitAgentReady(t, "node1", start)
	if waited := time.Since(start); waited < policyWait {
		t.Errorf("the agent was ready after %s without a snapshot: it did not wait the %s for one", waited.Round(time.Millisecond), policyWait)
	}
	t.Logf("kovs-agent on node1 ready %s after its restart, with the controller unreachable", time.Since(start).Round(time.Millisecond))
	ps, err := c.s.AgentPolicyStatus("node1")
	if err != nil {
		t.Fatal(err)
	}
	if ps.Received {
		t.Fatalf("node1's agent says it received a policy snapshot with the controller unreachable: %+v", ps)
	}
	if r := c.s.Probe(cc, framework.PodIPs(a)[0], "80/tcp", time.Second); !r.TimedOut {
		t.Errorf("fail closed: c -> a (allowed by the policy) is not closed while node1 has no policy: %s", framework.Describe(r))
	}
	unblock()
	framework.Eventually(t, 90*time.Second, "c -> a allowed again once the controller is reachable", func() error {
		if r := c.s.Probe(cc, framework.PodIPs(a)[0], "80/tcp", time.Second); !r.Connected {
			return fmt.Errorf("%s", framework.Describe(r))
		}
		return nil
	})
	t.Logf("policy back on node1 %s after the restart", time.Since(start).Round(time.Millisecond))
	denied.finish()
	denied.check(t, "the agent's start without the controller")
}

// blockController makes kovs-controller unreachable from node's namespace: connections
// to the policy stream's port on its loopback (the node emulator's forwarder) are reset.
// It returns the undo, which may be called more than once.
func (c *cluster) blockController(t *testing.T, node string) func() {
	netns := c.s.Layout.NodeNetNS(node)
	port := strconv.Itoa(sandbox.NodeControllerPort)
	rules := "table inet kovs-e2e-block {\n chain output {\n type filter hook output priority 0;\n" +
		" tcp dport " + port + " reject with tcp reset\n }\n}\n"
	cmd := exec.Command("ip", "netns", "exec", netns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("block the controller in %s: %v: %s", netns, err, out)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			out, err := exec.Command("ip", "netns", "exec", netns, "nft", "delete", "table", "inet", "kovs-e2e-block").CombinedOutput()
			if err != nil {
				t.Errorf("unblock the controller in %s: %v: %s", netns, err, out)
			}
		})
	}
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
		for _, p := range []struct{ host, pod string }{{"node2", "a"}, {"node1", "c"}} {
			if r := c.s.Probe(c.hosts[p.host], framework.PodIPs(c.pods[p.pod])[0], "80/tcp", time.Second); !r.TimedOut {
				return fmt.Errorf("%s -> %s: %s", p.host, p.pod, framework.Describe(r))
			}
		}
		return nil
	})
	return func() {
		if err := c.s.Client.NetworkingV1().NetworkPolicies("x").Delete(ctx, np.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete policy %s: %v", np.Name, err)
		}
		framework.Eventually(t, 30*time.Second, "the policy removed", func() error {
			if r := c.s.Probe(c.hosts["node2"], framework.PodIPs(c.pods["a"])[0], "80/tcp", time.Second); !r.Connected {
				return fmt.Errorf("node2 cannot reach a: %s", framework.Describe(r))
			}
			return nil
		})
	}
}
