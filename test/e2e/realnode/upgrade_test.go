package realnode_test

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// oldReleaseEnv names a checkout of the previous release with its `make build` and
// `make images` done (make upgrade-test prepares one at a pinned commit).
const oldReleaseEnv = "KOVS_OLD_RELEASE_DIR"

// upUpgraded brings up TestRealNodes's three real nodes. With the previous release at
// hand (KOVS_OLD_RELEASE_DIR: its kovs-sandbox, images and dist/; make test builds it
// into the cache at a pinned commit) they come up with that release, where
// kovs-controller allocates pod addresses and OVS is a sidecar of the agent's pod, and the
// subtest "upgrade from the previous release" (checkUpgrade) upgrades them to this tree's
// release; its workload is then removed, so every later subtest of TestRealNodes checks an
// upgraded cluster, `kubectl delete -k` last. Without it they come up with this release
// and that subtest is skipped (make test fails on the skip: it always sets it).
func upUpgraded(t *testing.T, env framework.Env) *framework.Sandbox {
	t.Helper()
	oldDir := os.Getenv(oldReleaseEnv)
	if oldDir == "" {
		s := framework.Up(t, env, "--runtime", "containerd", "--nodes", "3")
		t.Run("upgrade from the previous release", func(t *testing.T) {
			t.Skipf("set %s to a checkout of the previous release with make build and make images done (make test and make upgrade-test do it)", oldReleaseEnv)
		})
		return s
	}
	old := framework.Env{BinDir: filepath.Join(oldDir, "_output", "bin"), K8sBinDir: env.K8sBinDir}
	for _, f := range []string{filepath.Join(old.BinDir, "kovs-sandbox"), filepath.Join(oldDir, "_output", "images", "agent.tar"),
		filepath.Join(oldDir, "dist", "kustomization.yaml")} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%s=%s: %s is missing: run make build and make images in that checkout", oldReleaseEnv, oldDir, f)
		}
	}
	if _, err := os.Stat(filepath.Join(env.BinDir, "..", "images", "agent.tar")); err != nil {
		t.Fatalf("the new release's images: %v: run make images", err)
	}
	// The previous release's kovs-sandbox takes its own images and dist/.
	s := framework.Up(t, old, "--runtime", "containerd", "--nodes", "3")
	if !t.Run("upgrade from the previous release", func(t *testing.T) { checkUpgrade(t, s, env) }) {
		t.FailNow()
	}
	removeUpgradeWorkload(t, s)
	return s
}

// removeUpgradeWorkload deletes what checkUpgrade ran (its namespace) and waits until
// kovs-controller has exactly its two replicas again, none terminating: the later
// subtests start as on a fresh install.
func removeUpgradeWorkload(t *testing.T, s *framework.Sandbox) {
	t.Helper()
	// The probers' bash ignores SIGTERM as PID 1: no grace period to wait out.
	kubectlOK(t, s, "-n", ns, "delete", "pods", "--all", "--grace-period=1", "--wait=false")
	kubectlOK(t, s, "delete", "namespace", ns, "--wait=true", "--timeout=120s")
	framework.Eventually(t, 120*time.Second, "kovs-controller's two replicas, none terminating", func() error {
		pods, err := s.Client.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{LabelSelector: "app=kovs-controller"})
		if err != nil {
			return err
		}
		running := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if len(pods.Items) != 2 || running != 2 {
			return fmt.Errorf("%d pods, %d running and not terminating", len(pods.Items), running)
		}
		return nil
	})
}

// checkUpgrade is issue #26's upgrade on real nodes: s runs the previous release (its
// kovs-sandbox, images and dist/: kovs-controller allocates pod addresses), pods run on
// every node with long-lived TCP sessions between nodes and a new connection every
// 100 ms, to each other node's pod and through a Service, under a NetworkPolicy that an
// intruder on node2 probes throughout; one pod is deleted just before the upgrade, then
// kovs is upgraded to env's release in docs/upgrades.md's order (issue #27's rolling
// upgrade). Every running pod keeps its address, no session breaks, no new connection
// fails (but while an OVS on its path is handed over), no denied connection is let
// through; pods created afterwards get no address a running pod holds nor the one freed
// before the upgrade, and reach the old ones.
func checkUpgrade(t *testing.T, s *framework.Sandbox, env framework.Env) {
	s.EnsureNamespace(t, ns, nil)
	s.Apply(upgradeWebDeployment)
	kubectlOK(t, s, "-n", ns, "rollout", "status", "deployment/web", "--timeout=180s")
	web := podsOf(t, s, ns, "app=web")
	if len(web) != 3 {
		t.Fatalf("web pods on %d nodes, want one on each of 3: %v", len(web), web)
	}
	// A Service over the web pods' echo port, which the probers' new connections use too.
	s.Apply(upgradeService)
	svc, err := s.Client.CoreV1().Services(ns).Get(context.Background(), "web-echo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svcIP := svc.Spec.ClusterIP
	for node := range web {
		var targets []string
		for other, p := range web {
			if other != node {
				targets = append(targets, framework.PodIPs(&p)[0].String())
			}
		}
		sort.Strings(targets)
		s.Apply(proberPod(node, svcIP, targets))
	}
	kubectlOK(t, s, "-n", ns, "wait", "--for=condition=Ready", "pod", "-l", "app=prober", "--timeout=120s")
	probers := podsOf(t, s, ns, "app=prober")
	framework.Eventually(t, 60*time.Second, "every prober's sessions and new connections to run", func() error {
		for _, p := range probers {
			sts, err := proberState(s, p.Name)
			if err != nil {
				return err
			}
			for _, st := range sts {
				if st.broken {
					t.Fatalf("%s before the upgrade: %s", p.Name, st)
				}
				if st.rounds < 3 {
					return fmt.Errorf("%s: %s", p.Name, st)
				}
			}
		}
		return nil
	})
	// A NetworkPolicy in force throughout, made while the probers' traffic runs: the web
	// pods' echo port only from the probers, their HTTP port (the intruder's control) from
	// anyone. Once it is realized, an intruder on node2 probes the echo port of the web
	// pods of the other nodes; it is denied with evidence before the upgrade, and none of
	// its probes may be let through, then or later.
	s.Apply(upgradePolicy)
	waitRealized(t, s, ns, "web-echo-from-probers")
	var denyTargets []string
	for node, p := range web {
		if node != "node2" {
			denyTargets = append(denyTargets, framework.PodIPs(&p)[0].String())
		}
	}
	sort.Strings(denyTargets)
	s.Apply(intruderPod("node2", denyTargets))
	intruder := "intruder-node2"
	kubectlOK(t, s, "-n", ns, "wait", "--for=condition=Ready", "pod", intruder, "--timeout=120s")
	framework.Eventually(t, 60*time.Second, "the intruder's probes denied with evidence", func() error {
		sts, err := intruderState(s, intruder)
		if err != nil {
			return err
		}
		for _, st := range sts {
			if st.letThrough > 0 {
				t.Fatalf("before the upgrade: %s", st)
			}
			if st.evidenced < 3 {
				return fmt.Errorf("%s", st)
			}
		}
		return nil
	})

	// A pod freed just before the upgrade: its address must not come back right after.
	s.Apply(`apiVersion: v1
kind: Pod
metadata: {name: freed, namespace: ` + ns + `}
spec:
  nodeName: node2
  containers: [{name: c, image: ` + agnhost + `, imagePullPolicy: IfNotPresent, args: [pause]}]
`)
	freedPod := s.WaitRunning(t, ns, "freed", 120*time.Second)
	freed := framework.PodIPs(freedPod)
	kubectlOK(t, s, "-n", ns, "delete", "pod", "freed", "--wait=true", "--timeout=60s")

	before := runningPodAddresses(t, s)
	highWater := map[string]string{}
	for node := range web {
		n, err := s.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		highWater[node] = n.Annotations["kovs.io/address-high-water"]
	}
	t.Logf("before the upgrade: %d running pods with kovs addresses; freed %v on node2; the old controller's high water %v", len(before), freed, highWater)

	upgradeStart := time.Now()
	out := s.Upgrade(t, env)
	t.Logf("upgraded in %s:\n%s", time.Since(upgradeStart).Round(time.Second), out)
	for _, p := range probers {
		kubectlOK(t, s, "exec", "-n", ns, p.Name, "--", "touch", "/tmp/upgraded")
	}
	kubectlOK(t, s, "exec", "-n", ns, intruder, "--", "touch", "/tmp/upgraded")
	// The traffic must be seen flowing on the new release, not merely not failing.
	framework.Eventually(t, 90*time.Second, "sessions and new connections to run on the upgraded nodes", func() error {
		for _, p := range probers {
			sts, err := proberState(s, p.Name)
			if err != nil {
				return err
			}
			for _, st := range sts {
				if st.broken {
					return nil // no more to wait for: the counts below report it
				}
				if st.after < 10 {
					return fmt.Errorf("%s: %s", p.Name, st)
				}
			}
		}
		sts, err := intruderState(s, intruder)
		if err != nil {
			return err
		}
		for _, st := range sts {
			if st.letThrough > 0 {
				return nil // the check below reports it
			}
			if st.after < 5 {
				return fmt.Errorf("%s: %s", intruder, st)
			}
		}
		return nil
	})
	for _, p := range probers {
		kubectlOK(t, s, "exec", "-n", ns, p.Name, "--", "touch", "/tmp/stop")
	}
	kubectlOK(t, s, "exec", "-n", ns, intruder, "--", "touch", "/tmp/stop")
	var summaries []string
	framework.Eventually(t, 60*time.Second, "every prober to report", func() error {
		summaries = nil
		for _, p := range probers {
			logs, err := s.Kubectl("logs", "-n", ns, p.Name)
			if err != nil || !strings.Contains(logs, "\nDONE") {
				return fmt.Errorf("%s has not reported: %v\n%s", p.Name, err, logs)
			}
			summaries = append(summaries, fmt.Sprintf("%s (%s):\n%s", p.Name, p.Spec.NodeName, strings.TrimSpace(logs)))
		}
		return nil
	})
	var sessions, broken, conns, svcConns, failed int
	var longest time.Duration
	for _, p := range probers {
		sts, err := proberState(s, p.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range sts {
			if st.kind == "session" {
				sessions++
				if st.broken {
					broken++
				}
			} else {
				conns += st.rounds
				failed += st.failed
				longest = max(longest, st.maxGap)
				if st.target == svcIP {
					svcConns += st.rounds
				}
			}
		}
	}
	t.Logf("across the upgrade: %d long-lived sessions, %d broken; %d new connections (%d through the Service %s), %d failed; longest gap between two successful new connections %s\n%s",
		sessions, broken, conns, svcConns, svcIP, failed, longest, strings.Join(summaries, "\n"))
	if sessions != 6 || broken != 0 {
		t.Errorf("want 6 sessions and none broken: %d sessions, %d broken", sessions, broken)
	}
	checkFailuresInHandOvers(t, s, out, web, probers, svcIP, failed)
	ists, err := intruderState(s, intruder)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range ists {
		t.Logf("the intruder on node2, the policy's denied pair: %s", st)
		if st.letThrough > 0 {
			t.Errorf("a connection the NetworkPolicy denies was let through during the upgrade: %s", st)
		}
	}

	after := runningPodAddresses(t, s)
	for uid, b := range before {
		a, ok := after[uid]
		switch {
		case !ok:
			t.Errorf("pod %s is gone after the upgrade", b.name)
		case fmt.Sprint(a.ips) != fmt.Sprint(b.ips):
			t.Errorf("pod %s had %v before the upgrade, %v after", b.name, b.ips, a.ips)
		}
	}
	for _, group := range []map[string]corev1.Pod{web, probers} {
		checkAddresses(t, s, group) // the address is still on each pod's eth0
	}

	// Pods created after the upgrade: the new agents allocate.
	s.Apply(strings.ReplaceAll(outageDeployment, "outage", "fresh"))
	kubectlOK(t, s, "-n", ns, "rollout", "status", "deployment/fresh", "--timeout=240s")
	fresh := podsOf(t, s, ns, "app=fresh")
	if len(fresh) != 3 {
		t.Fatalf("fresh pods on %d nodes, want 3: %v", len(fresh), fresh)
	}
	checkAddresses(t, s, fresh)
	held := map[netip.Addr]string{}
	for _, b := range before {
		for _, ip := range b.ips {
			held[ip] = "running pod " + b.name
		}
	}
	for _, ip := range freed {
		held[ip] = "pod freed just before the upgrade"
	}
	for node, p := range fresh {
		for _, ip := range framework.PodIPs(&p) {
			if owner, dup := held[ip]; dup {
				t.Errorf("new pod %s on %s got %s, the address of the %s", p.Name, node, ip, owner)
			}
		}
	}
	t.Logf("pods created after the upgrade: %v (freed before it: %v)", podIPList(fresh), freed)
	framework.Eventually(t, 120*time.Second, "every new pod to reach the old web pods and be reached by them", func() error {
		for node, np := range fresh {
			for other, wp := range web {
				if v, err := connect(s, ns, np.Name, framework.PodIPs(&wp)[0], 8080); err != nil || v != "CONNECTED" {
					return fmt.Errorf("%s (%s) -> web on %s: %s %v", np.Name, node, other, v, err)
				}
				if v, err := connect(s, ns, wp.Name, framework.PodIPs(&np)[0], 8080); err != nil || v != "CONNECTED" {
					return fmt.Errorf("web on %s -> %s (%s): %s %v", other, np.Name, node, v, err)
				}
			}
		}
		return nil
	})

	// The same release again: dist/ leaves both pod templates as they are, so the upgrade
	// must restart the controller and the agents itself; the pods keep their addresses,
	// the new agents' own records now (br-int's high water, not the Node's).
	held1 := runningPodAddresses(t, s)
	out = s.Upgrade(t, env)
	t.Logf("upgraded again to the same release:\n%s", out)
	for _, w := range []string{"deployment/kovs-controller", "daemonset/kovs-agent"} {
		if !strings.Contains(out, w+"'s pod template as it was: rollout restart") {
			t.Errorf("upgrading to the same release did not restart %s", w)
		}
	}
	held2 := runningPodAddresses(t, s)
	for uid, b := range held1 {
		if a, ok := held2[uid]; !ok || fmt.Sprint(a.ips) != fmt.Sprint(b.ips) {
			t.Errorf("pod %s had %v before the second upgrade, %v after", b.name, b.ips, a.ips)
		}
	}
}

// handOverSettle is how long after br-int has its flows back in a node's new ovs-vswitchd
// a new connection may still fail: an `nc -w 2` attempt started in the pause waits 2 s to
// fail, and its failure is logged when it ends; 1 s more for the loaded machine.
const handOverSettle = 3 * time.Second

// checkFailuresInHandOvers: a new connection may fail only while an OVS on its path was
// handed over to kovs-ovs (upgradeOut's sandbox.HandOverLine windows, the prober's node or
// the target's, from the old ovs-vswitchd's stop to handOverSettle after br-int had its
// flows back in the new one): on the userspace datapath the datapath is that process, so its replacement
// pauses the node's traffic once (docs/upgrades.md). A failure outside every window, or
// one the probers' logs do not time, fails the test.
func checkFailuresInHandOvers(t *testing.T, s *framework.Sandbox, upgradeOut string, web, probers map[string]corev1.Pod, svcIP string, failed int) {
	t.Helper()
	type window struct{ from, to time.Time }
	windows := map[string]window{}
	for _, m := range sandbox.HandOverLine.FindAllStringSubmatch(upgradeOut, -1) {
		from, err1 := time.Parse(time.RFC3339Nano, m[2])
		to, err2 := time.Parse(time.RFC3339Nano, m[3])
		if err1 != nil || err2 != nil {
			t.Fatalf("hand-over line %q: %v %v", m[0], err1, err2)
		}
		windows[m[1]] = window{from, to.Add(handOverSettle)}
	}
	nodeOf := map[string]string{}
	for node, p := range web {
		nodeOf[framework.PodIPs(&p)[0].String()] = node
	}
	failure := regexp.MustCompile(`NEWCONN (\S+) failed at (\d+)\.(\d+)`)
	timed, inside := 0, 0
	for node, p := range probers {
		logs, err := s.Kubectl("logs", "-n", ns, p.Name)
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		for _, m := range failure.FindAllStringSubmatch(logs, -1) {
			timed++
			sec, _ := strconv.ParseInt(m[2], 10, 64)
			usec, _ := strconv.ParseInt(m[3], 10, 64)
			at := time.Unix(sec, usec*1000)
			ok := false
			path := []string{node, nodeOf[m[1]]}
			if m[1] == svcIP { // through the Service: the endpoint may be on any node
				path = slices.Collect(maps.Keys(windows))
			}
			for _, n := range path {
				if w, has := windows[n]; has && !at.Before(w.from) && !at.After(w.to) {
					ok = true
				}
			}
			if ok {
				inside++
				continue
			}
			t.Errorf("%s -> %s (%s): a new connection failed at %s, outside the OVS hand-overs %v", node, m[1], nodeOf[m[1]], at.UTC().Format(time.RFC3339Nano), windows)
		}
	}
	if timed != failed {
		t.Errorf("the probers counted %d failed new connections, their logs time %d", failed, timed)
	}
	t.Logf("%d new connections failed, all while an OVS on their path was handed over to kovs-ovs (%d nodes handed over)", inside, len(windows))
}

type podAddresses struct {
	name string
	ips  []netip.Addr
}

// runningPodAddresses is every running pod off the host network (the test's pods and the
// cluster's add-ons, whose addresses are kovs's), by UID.
func runningPodAddresses(t *testing.T, s *framework.Sandbox) map[string]podAddresses {
	t.Helper()
	list, err := s.Client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]podAddresses{}
	for _, p := range list.Items {
		if p.Spec.HostNetwork || p.Status.Phase != corev1.PodRunning {
			continue
		}
		out[string(p.UID)] = podAddresses{name: p.Namespace + "/" + p.Name, ips: framework.PodIPs(&p)}
	}
	return out
}

// stateLines reads a script pod's state files (/tmp/state/*), a line each: the file's
// name and its content.
func stateLines(s *framework.Sandbox, pod string) (string, []string, error) {
	out, err := execIn(s, ns, pod, "bash", "-c", `cd /tmp/state && for f in *; do echo "$f $(cat $f)"; done`)
	if err != nil {
		return "", nil, fmt.Errorf("%s: read its state: %v\n%s", pod, err, out)
	}
	return out, strings.Split(strings.TrimSpace(out), "\n"), nil
}

// proberStatus is one loop of a prober pod, read from its state file.
type proberStatus struct {
	kind, target string // "session" or "newconn"
	// rounds: echoes on the session, or successful new connections; after: of those,
	// since /tmp/upgraded exists.
	rounds, after, failed int
	broken                bool
	maxGap                time.Duration
}

func (p proberStatus) String() string {
	if p.kind == "session" {
		return fmt.Sprintf("session to %s: %d echoes (%d after the upgrade), broken %v", p.target, p.rounds, p.after, p.broken)
	}
	return fmt.Sprintf("new connections to %s: %d ok (%d after the upgrade), %d failed, longest gap %s", p.target, p.rounds, p.after, p.failed, p.maxGap)
}

// proberState reads a prober's state files (/tmp/state/session-<ip>, newconn-<ip>): one
// of each per target once its loops have made a round.
func proberState(s *framework.Sandbox, pod string) ([]proberStatus, error) {
	out, lines, err := stateLines(s, pod)
	if err != nil {
		return nil, err
	}
	var sts []proberStatus
	for _, line := range lines {
		var st proberStatus
		var name string
		var broken, gapMs int
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		name = f[0]
		kind, target, _ := strings.Cut(name, "-")
		st.kind, st.target = kind, target
		var err error
		switch kind {
		case "session":
			_, err = fmt.Sscan(strings.Join(f[1:], " "), &st.rounds, &st.after, &broken)
			st.broken = broken != 0
		case "newconn":
			_, err = fmt.Sscan(strings.Join(f[1:], " "), &st.rounds, &st.failed, &st.after, &gapMs)
			st.maxGap = time.Duration(gapMs) * time.Millisecond
		default:
			err = fmt.Errorf("unknown state file")
		}
		if err != nil {
			return nil, fmt.Errorf("%s: state line %q: %v", pod, line, err)
		}
		sts = append(sts, st)
	}
	if len(sts) != 5 {
		return nil, fmt.Errorf("%s: %d state files, want a session and a new-connection loop to each of 2 other nodes and a new-connection loop to the Service:\n%s", pod, len(sts), out)
	}
	return sts, nil
}

// The web pods of the upgrade test: agnhost netexec, and a TCP echo server (socat) on
// 9000 for the probers' sessions and new connections.
var upgradeWebDeployment = strings.Replace(webDeployment, `          readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 2}
`, `          readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 2}
        - name: echo
          image: `+agnhost+`
          imagePullPolicy: IfNotPresent
          command: [socat, "TCP-LISTEN:9000,fork,reuseaddr", "EXEC:cat"]
`, 1)

// proberScript keeps, to each target, a TCP session open that echoes a counter every
// 0.5 s (a missing or wrong echo within 10 s, or an error, breaks it) and makes a new
// connection every 100 ms that must echo one line; to the Service (its first argument),
// the new connections only. (Sessions through the Service are not part of the test: on
// the userspace datapath conntrack lives in ovs-vswitchd, so the OVS hand-over loses the
// Service's NAT of established connections; not measured.) Each loop writes its counts to
// /tmp/state after every round; /tmp/upgraded starts the "after" counts and /tmp/stop
// ends the loops, which then log their summary and DONE.
const proberScript = `trap '' PIPE
mkdir -p /tmp/state
ms() { local t=${EPOCHREALTIME/./}; REPLY=$((t/1000)); }
session() {
  local t=$1 n=0 after=0 reply fd
  if ! exec {fd}<>/dev/tcp/$t/9000; then echo "SESSION $t could not open"; echo "0 0 1" > /tmp/state/session-$t; return; fi
  echo "SESSION $t open"
  while [ ! -e /tmp/stop ]; do
    n=$((n+1)); reply=""
    if ! echo "$n" >&$fd || ! read -r -t 10 -u $fd reply || [ "$reply" != "$n" ]; then
      echo "SESSION $t broken at echo $n (got '$reply') at $EPOCHREALTIME"; echo "$((n-1)) $after 1" > /tmp/state/session-$t; return
    fi
    [ -e /tmp/upgraded ] && after=$((after+1))
    echo "$n $after 0" > /tmp/state/session-$t
    sleep 0.5
  done
  echo "SESSION $t done: $n echoes, $after after the upgrade, not broken"
}
newconn() {
  local t=$1 ok=0 fail=0 after=0 maxgap=0 last now got
  ms; last=$REPLY
  while [ ! -e /tmp/stop ]; do
    got=$(printf 'c\n' | nc -N -w 2 $t 9000 2>&1)
    ms; now=$REPLY
    if [ "$got" = c ]; then
      ok=$((ok+1)); [ -e /tmp/upgraded ] && after=$((after+1))
      [ $((now-last)) -gt $maxgap ] && maxgap=$((now-last)); last=$now
    else
      fail=$((fail+1)); echo "NEWCONN $t failed at $EPOCHREALTIME: '$got'"
    fi
    echo "$ok $fail $after $maxgap" > /tmp/state/newconn-$t
    sleep 0.1
  done
  echo "NEWCONN $t done: $ok ok ($after after the upgrade), $fail failed, longest gap ${maxgap}ms"
}
svc=$1; shift
newconn $svc &
for t in "$@"; do session $t & newconn $t & done
wait
echo DONE
exec sleep infinity
`

// proberPod runs proberScript on node against targets, and its new connections through
// the Service at svcIP.
func proberPod(node, svcIP string, targets []string) string {
	return scriptPod("prober-"+node, "prober", node, proberScript, append([]string{svcIP}, targets...))
}

// scriptPod is a pod named name, labelled app, on node, whose bash runs script with args.
func scriptPod(name, app, node, script string, args []string) string {
	indented := "          " + strings.ReplaceAll(strings.TrimRight(script, "\n"), "\n", "\n          ")
	return `apiVersion: v1
kind: Pod
metadata: {name: ` + name + `, namespace: ` + ns + `, labels: {app: ` + app + `}}
spec:
  nodeName: ` + node + `
  containers:
    - name: ` + app + `
      image: ` + agnhost + `
      imagePullPolicy: IfNotPresent
      command:
        - bash
        - -c
        - |
` + indented + `
        - ` + app + `
` + "        - " + strings.Join(args, "\n        - ") + `
`
}

// upgradePolicy: the web pods' echo port (9000) admits only the probers, their HTTP port
// (8080) everyone (the fresh pods after the upgrade, and the intruder's control).
var upgradePolicy = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-echo-from-probers, namespace: ` + ns + `}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Ingress]
  ingress:
    - from: [{podSelector: {matchLabels: {app: prober}}}]
    - ports: [{protocol: TCP, port: 8080}]
`

// upgradeService is a Service over the web pods' echo port; the probers' new connections
// use it.
var upgradeService = `apiVersion: v1
kind: Service
metadata: {name: web-echo, namespace: ` + ns + `}
spec:
  selector: {app: web}
  ports: [{protocol: TCP, port: 9000, targetPort: 9000}]
`

// intruderScript probes each target (a web pod) every 100 ms twice in a row: its HTTP
// port, which the policy admits from anyone (the control), then its echo port, which the
// policy denies the intruder. An echo on the denied port is a connection let through. A
// denied probe counts as denied with evidence only when the control to the same pod in the
// same round connected: the path was up and the policy, not a pause, stopped it; without
// it the round is not evidence either way. Counts go to /tmp/state/denied-<ip>;
// /tmp/upgraded starts the "after" count, /tmp/stop ends the loops.
const intruderScript = `trap '' PIPE
mkdir -p /tmp/state
probe() {
  local t=$1 evidenced=0 unproven=0 let=0 after=0 got
  while [ ! -e /tmp/stop ]; do
    if nc -z -w 1 $t 8080; then ctl=1; else ctl=0; fi
    got=$(printf 'x\n' | nc -N -w 1 $t 9000 2>&1)
    if [ "$got" = x ]; then
      let=$((let+1)); echo "DENIED $t let through at $EPOCHREALTIME"
    elif [ $ctl = 1 ]; then
      evidenced=$((evidenced+1)); [ -e /tmp/upgraded ] && after=$((after+1))
    else
      unproven=$((unproven+1))
    fi
    echo "$evidenced $unproven $let $after" > /tmp/state/denied-$t
    sleep 0.1
  done
  echo "DENIED $t done: $evidenced denied with evidence ($after after the upgrade), $unproven without, $let let through"
}
for t in "$@"; do probe $t & done
wait
echo DONE
exec sleep infinity
`

// intruderPod runs intruderScript on node against targets.
func intruderPod(node string, targets []string) string {
	return scriptPod("intruder-"+node, "intruder", node, intruderScript, targets)
}

// intruderStatus is one target of the intruder, read from its state file.
type intruderStatus struct {
	target                                 string
	evidenced, unproven, letThrough, after int
}

func (s intruderStatus) String() string {
	return fmt.Sprintf("denied probes to %s: %d denied with evidence (%d after the upgrade), %d without evidence, %d let through",
		s.target, s.evidenced, s.after, s.unproven, s.letThrough)
}

// intruderState reads the intruder's state files: one per target (2) once its loop has
// made a round.
func intruderState(s *framework.Sandbox, pod string) ([]intruderStatus, error) {
	out, lines, err := stateLines(s, pod)
	if err != nil {
		return nil, err
	}
	var sts []intruderStatus
	for _, line := range lines {
		f := strings.Fields(line)
		if len(f) != 5 || !strings.HasPrefix(f[0], "denied-") {
			return nil, fmt.Errorf("%s: state line %q", pod, line)
		}
		st := intruderStatus{target: strings.TrimPrefix(f[0], "denied-")}
		if _, err := fmt.Sscan(strings.Join(f[1:], " "), &st.evidenced, &st.unproven, &st.letThrough, &st.after); err != nil {
			return nil, fmt.Errorf("%s: state line %q: %v", pod, line, err)
		}
		sts = append(sts, st)
	}
	if len(sts) != 2 {
		return nil, fmt.Errorf("%s: %d state files, want one per web pod of the other nodes:\n%s", pod, len(sts), out)
	}
	return sts, nil
}
