package realnode_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cnins "github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// podEnd is a real pod seen from the test: its network namespace (that of one of its
// processes), so that the test's own sockets, made in it, are the pod's traffic through
// its eth0, its veth and br-int.
type podEnd struct {
	name, namespace, node string
	netns                 string
	addr                  netip.Addr
}

// podNetNS finds p's network namespace through a process of its containers (kubelet's
// cgroups carry the pod's UID, cgroupfs with dashes, systemd with underscores).
func podNetNS(t *testing.T, s *framework.Sandbox, p *corev1.Pod) podEnd {
	t.Helper()
	uid := string(p.UID)
	marks := []string{"pod" + uid, "pod" + strings.ReplaceAll(uid, "-", "_")}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cg, err := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if err != nil || !strings.Contains(string(cg), "/"+s.Layout.NetNSPrefix()) {
			continue
		}
		for _, m := range marks {
			if strings.Contains(string(cg), m) {
				ips := framework.PodIPs(p)
				if len(ips) == 0 {
					t.Fatalf("pod %s has no IP", p.Name)
				}
				return podEnd{name: p.Name, namespace: p.Namespace, node: p.Spec.NodeName, netns: "/proc/" + e.Name() + "/ns/net", addr: ips[0]}
			}
		}
	}
	t.Fatalf("no process of pod %s (UID %s) found", p.Name, uid)
	return podEnd{}
}

// serveIn runs a responder on 80/tcp in the pod's network namespace until the test ends.
func serveIn(t *testing.T, p podEnd) {
	t.Helper()
	var r *responder.Responder
	var err error
	if nerr := cnins.WithNetNSPath(p.netns, func(cnins.NetNS) error {
		r, err = responder.Serve(context.Background(), []responder.Port{{Number: 80, Protocol: responder.TCP}}, p.name)
		return nil
	}); nerr != nil {
		t.Fatal(nerr)
	}
	if err != nil {
		t.Fatalf("responder in %s: %v", p.name, err)
	}
	t.Cleanup(func() { _ = r.Close() })
}

// traffic holds established sessions that echo every interval, opens a new connection
// every interval on each allowed pair, and probes each denied pair every interval: what a
// rollout does to running traffic and to policy.
type traffic struct {
	sessions []*sessionLoop
	fresh    []*freshLoop
	stop     chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex // guards the loops' counts, which await reads while they run
	// echoTimeout is how long a session's echo may take before it counts as broken.
	echoTimeout time.Duration
}

type sessionLoop struct {
	name string
	s    *responder.Session
	err  error
	n    int
}

// freshLoop opens new connections on one pair. On an allowed pair each must connect and
// read the responder's line. On a denied pair (denied) each must get no answer, and is
// denied only on evidence: the destination's deny flow counted it (framework.ProbeDenied;
// silence is no proof of a drop, except while the switch restarts).
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

type pair struct {
	from, to podEnd
	denied   bool
}

const (
	keptFailures       = 10
	probeTimeout       = time.Second
	deniedProbeTimeout = 250 * time.Millisecond
)

// startTraffic starts the loops; a session breaks when an echo takes more than 2 s.
func startTraffic(t *testing.T, s *framework.Sandbox, pairs []pair, interval time.Duration) *traffic {
	t.Helper()
	return startTrafficEcho(t, s, pairs, interval, 2*time.Second)
}

// startTrafficEcho is startTraffic whose sessions wait up to echoTimeout for each echo:
// through a pause TCP retransmits until the path is back, and a session that carries on
// after it has survived it.
func startTrafficEcho(t *testing.T, s *framework.Sandbox, pairs []pair, interval, echoTimeout time.Duration) *traffic {
	t.Helper()
	tr := &traffic{stop: make(chan struct{}), echoTimeout: echoTimeout}
	for _, p := range pairs {
		name := fmt.Sprintf("%s(%s)->%s(%s)", p.from.name, p.from.node, p.to.name, p.to.node)
		fl := &freshLoop{name: name, denied: p.denied}
		if p.denied {
			fl.deny = nodeDenyPackets(s, p.to)
		}
		tr.fresh = append(tr.fresh, fl)
		tr.wg.Add(1)
		go tr.runFresh(fl, p.from, p.to.addr, interval)
		if p.denied {
			continue
		}
		sl := &sessionLoop{name: name, s: dial(t, p.from, p.to.addr)}
		tr.sessions = append(tr.sessions, sl)
		tr.wg.Add(1)
		go tr.runSession(sl, interval)
	}
	return tr
}

func target(dst netip.Addr) responder.Target {
	return responder.Target{Addr: dst, Port: responder.Port{Number: 80, Protocol: responder.TCP}}
}

// dial opens a TCP session from a pod to dst:80.
func dial(t *testing.T, from podEnd, dst netip.Addr) *responder.Session {
	t.Helper()
	var sess *responder.Session
	var err error
	if nerr := cnins.WithNetNSPath(from.netns, func(cnins.NetNS) error {
		sess, err = responder.Dial(context.Background(), target(dst), probeTimeout)
		return nil
	}); nerr != nil {
		t.Fatal(nerr)
	}
	if err != nil {
		t.Fatalf("session %s -> %s: %v", from.name, dst, err)
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
		err := sl.s.Echo(tr.echoTimeout)
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

func (tr *traffic) runFresh(fl *freshLoop, from podEnd, dst netip.Addr, interval time.Duration) {
	defer tr.wg.Done()
	for {
		select {
		case <-tr.stop:
			tr.mu.Lock()
			fl.endGap(time.Now())
			tr.mu.Unlock()
			return
		case <-time.After(interval):
		}
		now := time.Now()
		probe := func(timeout time.Duration) responder.Result {
			var r responder.Result
			if err := cnins.WithNetNSPath(from.netns, func(cnins.NetNS) error {
				r = responder.Probe(context.Background(), target(dst), timeout)
				return nil
			}); err != nil {
				r.Error = err.Error()
			}
			return r
		}
		if !fl.denied {
			r := probe(probeTimeout)
			tr.mu.Lock()
			fl.record(now, r, r.Connected && r.Reply != nil)
			tr.mu.Unlock()
			continue
		}
		// A denied probe waits it out: keep them frequent. The next starts once this one
		// is judged.
		r, denied, replaced, why := framework.ProbeDenied(fl.deny, func() responder.Result { return probe(deniedProbeTimeout) })
		tr.mu.Lock()
		if r.TimedOut {
			fl.evidence.Add(now, time.Now(), denied, replaced, why)
			if denied {
				fl.ok++
			}
		} else {
			fl.evidence.LetThrough++
			fl.record(now, r, false)
		}
		tr.mu.Unlock()
	}
}

// nodeDenyPackets reads the deny flow of pod p on its node's br-int, from the host through
// the root of the node's ovs-vswitchd (kovs-ovs's run directory, /var/run/openvswitch):
// it needs neither the agent nor kovs-ovs to answer an exec.
func nodeDenyPackets(s *framework.Sandbox, p podEnd) func() (framework.DenyCount, error) {
	pid := 0
	return framework.PodDenyPacketsAt(func() (string, string, error) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d/root", pid)); pid == 0 || err != nil {
			if pid = ovsVswitchdPid(s, p.node); pid == 0 {
				return "", "", fmt.Errorf("%s: no ovs-vswitchd runs", p.node)
			}
		}
		run := nodeRunDir(pid)
		return "unix:" + run + "/br-int.mgmt", "unix:" + run + "/db.sock", nil
	}, p.node, p.namespace, p.name)
}

// nodeRunDir is /var/run/openvswitch inside the root of process pid, seen from the host.
// Its /var/run is usually a symbolic link to /run, which the host would resolve against
// its own root: the link is followed here, inside the process's root.
func nodeRunDir(pid int) string {
	root := fmt.Sprintf("/proc/%d/root", pid)
	varRun := "/var/run"
	if l, err := os.Readlink(root + varRun); err == nil {
		if !filepath.IsAbs(l) {
			l = filepath.Join("/var", l)
		}
		varRun = filepath.Clean(l)
	}
	return root + varRun + "/openvswitch"
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
// traffic ran through the moment the caller means, however slow the machine.
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
// counts: failures are what the event cost, and none is acceptable.
func (tr *traffic) check(t *testing.T, during string) {
	t.Helper()
	for _, s := range tr.sessions {
		t.Logf("established session %s during %s: %d round trips, broken: %v", s.name, during, s.n, s.err != nil)
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
			t.Logf("%s %s during %s: %d attempted, %d as they must be, %d not, longest run of failures %s",
				kind, f.name, during, f.ok+f.failed, f.ok, f.failed, f.longestGap)
		}
		if f.failed > 0 {
			t.Errorf("%s: %d of %d %s %s failed (the first %d):\n  %s", during, f.failed, f.ok+f.failed, kind, f.name,
				len(f.failures), strings.Join(f.failures, "\n  "))
		}
	}
}

// report logs what the traffic saw through an event that is allowed to pause it (an
// ovs-vswitchd restart): established sessions must survive it and a denied pair must
// never connect, but new connections of allowed pairs may fail while it lasts. It returns
// the longest run of failed new connections of the allowed pairs, the pause.
func (tr *traffic) report(t *testing.T, during string) time.Duration {
	t.Helper()
	var pause time.Duration
	for _, s := range tr.sessions {
		t.Logf("established session %s during %s: %d round trips, broken: %v", s.name, during, s.n, s.err != nil)
		if s.err != nil {
			t.Errorf("%s: established connection %s broke after %d round trips: %v", during, s.name, s.n, s.err)
		}
	}
	for _, f := range tr.fresh {
		if f.denied {
			f.evidence.Check(t, f.name, during)
			if f.failed > 0 {
				t.Errorf("%s: %d of %d probes of the denied pair %s did not time out:\n  %s", during, f.failed, f.ok+f.failed, f.name,
					strings.Join(f.failures, "\n  "))
			}
			continue
		}
		t.Logf("new connections %s during %s: %d attempted, %d failed, longest run of failures %s", f.name, during, f.ok+f.failed, f.failed, f.longestGap)
		pause = max(pause, f.longestGap)
	}
	return pause
}
