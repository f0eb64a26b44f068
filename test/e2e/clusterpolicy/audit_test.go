package clusterpolicy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"
	"sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/kovs-net/kovs/go-controller/pkg/audit"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// testAuditLog runs on TestStatusConditions's sandbox (one node): the policy audit log
// (docs/audit.md) through the annotations, br-int's copies and the agent's file.
//
//	aud-x  annotated allow,deny; NetworkPolicy server-80: ingress TCP 80 to x/server
//	aud-q  not annotated; the same NetworkPolicy for q/server
//	aud-b  annotated "verbose" (malformed); the same NetworkPolicy for b/server
//	aud-admin  Admin 6, subject aud-x/server: ingress Deny TCP 8080 ("deny-8080"), annotated deny
//	aud-quiet  Admin 7, subject aud-q/server: the same rule, not annotated
//
// aud-c/client probes each server on TCP 80 (allowed), 81 (default deny) and 8080 (the
// Admin Deny). Lines must appear for aud-x and aud-admin, with the right names, and none
// for aud-q, aud-quiet and aud-b: the evidence that those were decided before the log was
// read is a logged deny probed after them, whose line comes after theirs would have.
func testAuditLog(t *testing.T, env framework.Env, s *framework.Sandbox, client versioned.Interface) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	logPath := s.Layout.AuditLog("node1")
	annotations := map[string]string{"aud-x": "allow,deny", "aud-b": "verbose"}
	servers := map[string]*corev1.Pod{}
	port80 := intstr.FromInt32(80)
	tcp := corev1.ProtocolTCP
	for _, name := range []string{"aud-x", "aud-q", "aud-b", "aud-c"} {
		s.EnsureNamespace(t, name, nil)
		if v, ok := annotations[name]; ok {
			nsObj, err := s.Client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if nsObj.Annotations == nil {
				nsObj.Annotations = map[string]string{}
			}
			nsObj.Annotations[audit.Annotation] = v
			if _, err := s.Client.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if name == "aud-c" {
			continue
		}
		s.CreatePod(t, framework.PodSpec{Namespace: name, Name: "server", Node: "node1", Labels: map[string]string{"app": "server"}})
		np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: "server-80"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port80}}}}}}
		if _, err := s.Client.NetworkingV1().NetworkPolicies(name).Create(ctx, np, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s.CreatePod(t, framework.PodSpec{Namespace: "aud-c", Name: "client", Node: "node1"})
	s.CreatePod(t, framework.PodSpec{Namespace: "aud-c", Name: "flood", Node: "node1"})
	clientPod := s.WaitRunning(t, "aud-c", "client", time.Minute)
	floodPod := s.WaitRunning(t, "aud-c", "flood", time.Minute)
	for _, name := range []string{"aud-x", "aud-q", "aud-b"} {
		servers[name] = s.WaitRunning(t, name, "server", time.Minute)
	}
	addr := func(ns string) netip.Addr { return framework.PodIPs(servers[ns])[0] }
	port8080 := intstr.FromInt32(8080)
	admin := func(name, subjectNS string, prio int32) *v1beta1.ClusterNetworkPolicy {
		return &v1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1beta1.ClusterNetworkPolicySpec{
			Tier: v1beta1.AdminTier, Priority: prio,
			Subject: v1beta1.ClusterNetworkPolicySubject{Pods: &v1beta1.NamespacedPod{
				NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": subjectNS}},
				PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}}}},
			Ingress: []v1beta1.ClusterNetworkPolicyIngressRule{{Name: "deny-8080", Action: v1beta1.ClusterNetworkPolicyRuleActionDeny,
				From:      []v1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "aud-c"}}}},
				Protocols: []v1beta1.ClusterNetworkPolicyProtocol{{TCP: &v1beta1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &v1beta1.Port{Number: port8080.IntVal}}}}}},
		}}
	}
	logged := admin("aud-admin", "aud-x", 6)
	logged.Annotations = map[string]string{audit.Annotation: "deny"}
	for _, p := range []*v1beta1.ClusterNetworkPolicy{logged, admin("aud-quiet", "aud-q", 7)} {
		if _, err := client.PolicyV1beta1().ClusterNetworkPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", p.Name, err)
		}
		defer func() {
			_ = client.PolicyV1beta1().ClusterNetworkPolicies().Delete(context.Background(), p.Name, metav1.DeleteOptions{})
		}()
	}
	programmed(t, ctx, client, "aud-admin", "enforced on 1/1 nodes")
	programmed(t, ctx, client, "aud-quiet", "enforced on 1/1 nodes")

	// The malformed annotation: an Event that names the value and the accepted verdicts.
	framework.Eventually(t, 30*time.Second, "an InvalidAuditAnnotation Event on namespace aud-b", func() error {
		events, err := s.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=aud-b"})
		if err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == "InvalidAuditAnnotation" && strings.Contains(e.Message, `"verbose"`) && strings.Contains(e.Message, "allow, deny") {
				return nil
			}
		}
		return fmt.Errorf("%d events, none InvalidAuditAnnotation naming \"verbose\" and allow, deny", len(events.Items))
	})

	// The logged allow comes once the annotations have reached the agent: probe until then.
	framework.Eventually(t, 20*time.Second, "an allow line for aud-c/client -> aud-x/server TCP 80", func() error {
		if r := s.Probe(clientPod, addr("aud-x"), "80/tcp", 2*time.Second); !r.Connected {
			return fmt.Errorf("not connected: %s", framework.Describe(r))
		}
		return withDiagnosis(s, findLine(logPath, func(r audit.Record) bool {
			return r.Verdict == audit.Allow && r.Kind == "NetworkPolicy" && r.Namespace == "aud-x" && r.Name == "server-80" &&
				r.Rule == "aud-x/server-80/ingress/0" && r.Direction == "Ingress" && r.SrcPod == "aud-c/client" && r.DstPod == "aud-x/server" &&
				r.DstPort == 80 && r.Protocol == "TCP" && r.Node == "node1" && r.DstIP == addr("aud-x").String()
		}))
	})
	// What is not logged: the same verdicts for aud-q, aud-quiet and aud-b.
	for _, ns := range []string{"aud-q", "aud-b"} {
		for _, port := range []string{"80/tcp", "81/tcp", "8080/tcp"} {
			r := s.Probe(clientPod, addr(ns), port, time.Second)
			if (port == "80/tcp") != r.Connected {
				t.Errorf("%s/server %s: connected %v: %s", ns, port, r.Connected, framework.Describe(r))
			}
		}
	}
	// Then the logged denies: the default deny and the Admin Deny of aud-x.
	for _, port := range []string{"81/tcp", "8080/tcp"} {
		if r := s.Probe(clientPod, addr("aud-x"), port, time.Second); r.Connected {
			t.Errorf("aud-x/server %s connected", port)
		}
	}
	framework.Eventually(t, 10*time.Second, "deny lines for aud-x's default deny and aud-admin's deny-8080", func() error {
		if err := findLine(logPath, func(r audit.Record) bool {
			return r.Verdict == audit.Deny && r.Kind == "NetworkPolicy" && r.Namespace == "aud-x" && r.Rule == "default-deny" &&
				r.Direction == "Ingress" && r.SrcPod == "aud-c/client" && r.DstPod == "aud-x/server" && r.DstPort == 81
		}); err != nil {
			return err
		}
		return findLine(logPath, func(r audit.Record) bool {
			return r.Verdict == audit.Deny && r.Kind == "ClusterNetworkPolicy" && r.Name == "aud-admin" && r.Rule == "deny-8080" &&
				r.Tier == "Admin" && r.SrcPod == "aud-c/client" && r.DstPod == "aud-x/server" && r.DstPort == 8080
		})
	})
	records := readLog(t, logPath)
	for _, r := range records {
		if r.Namespace == "aud-q" || r.Namespace == "aud-b" || r.Name == "aud-quiet" || strings.HasPrefix(r.DstPod, "aud-q/") || strings.HasPrefix(r.DstPod, "aud-b/") {
			t.Errorf("a line for what is not logged: %+v", r)
		}
	}
	// kovsctl audit reads the same file.
	out, err := exec.Command(filepath.Join(env.BinDir, "kovsctl"), "audit", "--file", logPath, "--policy", "aud-admin").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Admin aud-admin rule deny-8080") || !strings.Contains(string(out), "aud-c/client") {
		t.Errorf("kovsctl audit --policy aud-admin (%v):\n%s", err, out)
	}

	t.Run("Flood", func(t *testing.T) { testAuditFlood(t, s, floodPod, clientPod, addr("aud-x"), logPath) })
}

// testAuditFlood: a pod opens many denied UDP flows at once (each a new connection, so
// each a copy to the agent) while its own and another pod's allowed connections go on.
// The meter is set to a low rate on the switch for the test (what --audit-rate sets), so
// that the flood exceeds it on this machine: the log keeps to the rate plus the burst,
// the meter counts what it dropped, and the allowed connections all connect.
func testAuditFlood(t *testing.T, s *framework.Sandbox, flood, other *corev1.Pod, server netip.Addr, logPath string) {
	const rate, datagrams = 50, 3000
	meterArgs := func(r int) string {
		return fmt.Sprintf("meter=%d,pktps,burst,band=type=drop,rate=%d,burst_size=%d", pipeline.AuditMeterID, r, r)
	}
	ofctl := func(args ...string) {
		if out, err := exec.Command("ovs-ofctl", append([]string{"-O", "OpenFlow15"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ovs-ofctl %v: %v\n%s", args, err, out)
		}
	}
	ofctl("mod-meter", s.BrIntTarget("node1"), meterArgs(rate))
	defer ofctl("mod-meter", s.BrIntTarget("node1"), meterArgs(3000))
	droppedBefore, err := s.AgentMetric("node1", "kovs_agent_audit_meter_dropped_packets_total", nil)
	if err != nil {
		t.Fatal(err)
	}
	connBefore, err := s.AgentMetric("node1", "kovs_agent_audit_connection_dropped_packets_total", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The lines the flood phase makes: the flood's and the allowed connections' (TCP 80),
	// of packets that came after it began. A deny of the probes before it (81 and 8080)
	// is written a collapse window after its copy passed the meter, so it would count
	// in the lines and not in what the meter passed since the flood began.
	start := time.Now()
	fromFlood := func() int {
		return loggedCount(t, logPath, func(r audit.Record) bool { return !r.Time.Before(start) && isFloodLine(r, "aud-c/flood") })
	}
	allCounts := func() int {
		return loggedCount(t, logPath, func(r audit.Record) bool {
			return !r.Time.Before(start) && (isFloodLine(r, "aud-c/flood") || r.Protocol == "TCP" && r.DstPort == 80)
		})
	}
	meterIn := func() int {
		out, err := exec.Command("ovs-ofctl", "-O", "OpenFlow15", "meter-stats", s.BrIntTarget("node1"), fmt.Sprintf("meter=%d", pipeline.AuditMeterID)).CombinedOutput()
		if err != nil {
			t.Fatalf("meter-stats: %v\n%s", err, out)
		}
		m := regexp.MustCompile(`packet_in_count:(\d+)`).FindStringSubmatch(string(out))
		if m == nil {
			t.Fatalf("meter-stats without packet_in_count:\n%s", out)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	before, linesBefore, inBefore := fromFlood(), allCounts(), meterIn()
	took, probes, failed, floodErr := floodWhileProbing(s, flood, other, server, datagrams)
	if floodErr != nil {
		t.Fatalf("flood: %v", floodErr)
	}
	if len(failed) > 0 {
		t.Errorf("allowed connections failed during the flood: %v", failed)
	}
	// Every copy the meter let through is in the log or counted as dropped on the agent's
	// full monitor connection, and the meter counted the rest: the lines written since the
	// flood began (the flood's denies and the connections' allows, counts summed) plus
	// the connection's drops reach what entered the meter minus what it dropped, once the
	// held denies are written (one collapse window). A datagram the datapath lost before
	// any flow saw it made no copy and counts nowhere.
	var logged, lines, passed int
	var dropped, connDropped float64
	framework.Eventually(t, 10*time.Second, "every copy the meter passed logged or counted", func() error {
		logged = fromFlood() - before
		lines = allCounts() - linesBefore
		after, err := s.AgentMetric("node1", "kovs_agent_audit_meter_dropped_packets_total", nil)
		if err != nil {
			return err
		}
		dropped = after - droppedBefore
		conn, err := s.AgentMetric("node1", "kovs_agent_audit_connection_dropped_packets_total", nil)
		if err != nil {
			return err
		}
		connDropped = conn - connBefore
		passed = meterIn() - inBefore - int(dropped)
		if lines+int(connDropped) != passed {
			return fmt.Errorf("%d lines (counts summed) since the flood began and %.0f copies dropped on the agent's connection, the meter passed %d copies (and dropped %.0f)",
				lines, connDropped, passed, dropped)
		}
		return nil
	})
	if dropped == 0 {
		t.Errorf("the meter dropped no copy of a flood of %d flows at %d a second", datagrams, rate)
	}
	limit := int(float64(rate)*(took.Seconds()+2)) + rate
	t.Logf("flood of %d denied UDP flows in %v: %d logged (limit %d at %d/s), %.0f copies dropped by the meter, %d passed, %d lines in all, %.0f dropped on the agent's connection",
		datagrams, took.Round(time.Millisecond), logged, limit, rate, dropped, passed, lines, connDropped)
	if logged == 0 || logged > limit {
		t.Errorf("%d lines from the flood, want 1..%d (the meter's %d a second over %v, plus its burst)", logged, limit, rate, took)
	}

	// The same flood without logging (aud-x logs allows only), for the figures: how long
	// the flood and the allowed connections took with and without the log (no timed
	// assertion: the machine is shared).
	nsObj, err := s.Client.CoreV1().Namespaces().Get(context.Background(), "aud-x", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nsObj.Annotations[audit.Annotation] = "allow"
	if _, err := s.Client.CoreV1().Namespaces().Update(context.Background(), nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "aud-x's default deny without the audit copy", func() error {
		for _, f := range s.DumpFlows(t, "node1") {
			if f.Table == int(pipeline.IngressPolicy.ID) && f.Priority == 50 && strings.Contains(f.Text, "controller(") {
				return fmt.Errorf("still logged: %s", f.Text)
			}
		}
		return nil
	})
	tookOff, probesOff, failedOff, floodErr := floodWhileProbing(s, flood, other, server, datagrams)
	if floodErr != nil {
		t.Fatalf("flood without logging: %v", floodErr)
	}
	if len(failedOff) > 0 {
		t.Errorf("allowed connections failed during the flood without logging: %v", failedOff)
	}
	t.Logf("flood of %d new flows: %v with logging, %v without; 20 allowed connections during it: %v with logging, %v without",
		datagrams, took.Round(time.Millisecond), tookOff.Round(time.Millisecond), probes.Round(time.Millisecond), probesOff.Round(time.Millisecond))
}

// floodWhileProbing sends n UDP datagrams to server port 9 from flood, each from a new
// source port (a new connection each), while flood and other open 10 allowed TCP
// connections each to server port 80. It returns how long the flood and the connections
// took, and the connections that failed.
func floodWhileProbing(s *framework.Sandbox, flood, other *corev1.Pod, server netip.Addr, n int) (took, probes time.Duration, failed []string, err error) {
	start := time.Now()
	var wg sync.WaitGroup
	var floodErr error
	var floodTook time.Duration
	wg.Add(1)
	go func() {
		defer wg.Done()
		floodErr = ns.WithNetNSPath(s.NetNSPath(flood), func(ns.NetNS) error {
			for i := range n {
				c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(server, 9)))
				if err != nil {
					return err
				}
				_, _ = c.Write([]byte{byte(i)})
				c.Close()
				if i%100 == 99 {
					time.Sleep(10 * time.Millisecond) // pace: about 3,000 a second over a second or more
				}
			}
			return nil
		})
		floodTook = time.Since(start)
	}()
	for i := 0; i < 10; i++ {
		for _, from := range []*corev1.Pod{flood, other} {
			if r := s.Probe(from, server, "80/tcp", 2*time.Second); !r.Connected {
				failed = append(failed, fmt.Sprintf("%s/%s: %s", from.Namespace, from.Name, framework.Describe(r)))
			}
		}
	}
	probes = time.Since(start)
	wg.Wait()
	return floodTook, probes, failed, floodErr
}

// readLog reads the audit log's lines (none yet: an empty list).
func readLog(t testing.TB, path string) []audit.Record {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []audit.Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r audit.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err == nil {
			out = append(out, r)
		}
	}
	return out
}

func findLine(path string, want func(audit.Record) bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		var r audit.Record
		if json.Unmarshal(sc.Bytes(), &r) == nil && want(r) {
			return nil
		}
	}
	return fmt.Errorf("no such line among %d in %s", n, path)
}

// withDiagnosis adds to err what the agent says about the audit log: its metrics, its
// log lines about it, and the flows that send copies.
func withDiagnosis(s *framework.Sandbox, err error) error {
	if err == nil {
		return nil
	}
	var b strings.Builder
	for _, m := range []string{"kovs_agent_audit_packet_ins_total", "kovs_agent_audit_lines_total", "kovs_agent_audit_unresolved_total"} {
		v, merr := s.AgentMetric("node1", m, nil)
		fmt.Fprintf(&b, "\n%s %v %v", m, v, merr)
	}
	if log, rerr := os.ReadFile(s.Layout.LogFile("node1-kovs-agent")); rerr == nil {
		for _, l := range strings.Split(string(log), "\n") {
			if strings.Contains(l, "audit") {
				b.WriteString("\n" + l)
			}
		}
	}
	if flows, ferr := s.ListFlows("node1"); ferr == nil {
		for _, f := range flows {
			if strings.Contains(f.Text, "controller(") {
				fmt.Fprintf(&b, "\n%d packets: %s", f.Packets, f.Text)
			}
		}
	}
	out, _ := exec.Command("ovs-ofctl", "-O", "OpenFlow15", "meter-stats", s.BrIntTarget("node1")).CombinedOutput()
	b.WriteString("\n" + string(out))
	out, _ = exec.Command("ovs-appctl", "-t", sandbox.OVSVswitchdCtl(s.Layout, "node1"), "dpctl/dump-flows").CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "userspace") || strings.Contains(l, "meter") {
			b.WriteString("\n" + l)
		}
	}
	out, _ = exec.Command("ovs-appctl", "-t", sandbox.OVSVswitchdCtl(s.Layout, "node1"), "coverage/show").CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "packet_in") || strings.Contains(l, "upcall") || strings.Contains(l, "ofconn") || strings.Contains(l, "rconn") {
			b.WriteString("\n" + l)
		}
	}
	return fmt.Errorf("%w%s", err, b.String())
}

// loggedCount adds up the Count of the log's lines that keep accepts.
func loggedCount(tb testing.TB, logPath string, keep func(audit.Record) bool) int {
	tb.Helper()
	n := 0
	for _, r := range readLog(tb, logPath) {
		if keep(r) {
			n += r.Count
		}
	}
	return n
}

// isFloodLine: a line of flood's UDP flows to port 9.
func isFloodLine(r audit.Record, flood string) bool {
	return r.SrcPod == flood && r.Protocol == "UDP" && r.DstPort == 9
}
