package kovsctl_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// story is the output of `kovsctl trace`, read back.
type story struct {
	hops    []storyHop
	verdict string
	text    string
}

type storyHop struct {
	node, where, packet string
	steps               []storyStep
	ctStates            []string // the ct_state of each recirculation line
}

type storyStep struct {
	table int
	name  string
	rest  string
}

var (
	hopLine     = regexp.MustCompile(`^(\S+) br-int \((source node|after the tunnel)\): (.*)$`)
	stepLine    = regexp.MustCompile(`^\s+(\d+) (\S+)\s+(.*)$`)
	recircLine  = regexp.MustCompile(`^\s+\(recirculation\)\s+conntrack answered ct_state=(\S+);`)
	verdictLine = regexp.MustCompile(`^verdict: (.*)$`)
)

func parseStory(t *testing.T, out string) story {
	t.Helper()
	st := story{text: out}
	raw := false // inside a --raw block: the untouched trace, up to the next hop or the verdict
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "--- ovs-appctl ofproto/trace"):
			raw = true
		case hopLine.MatchString(line):
			raw = false
			m := hopLine.FindStringSubmatch(line)
			st.hops = append(st.hops, storyHop{node: m[1], where: m[2], packet: m[3]})
		case verdictLine.MatchString(line):
			raw = false
			st.verdict = verdictLine.FindStringSubmatch(line)[1]
		case raw:
		case recircLine.MatchString(line) && len(st.hops) > 0:
			h := &st.hops[len(st.hops)-1]
			h.ctStates = append(h.ctStates, recircLine.FindStringSubmatch(line)[1])
		case stepLine.MatchString(line) && len(st.hops) > 0:
			m := stepLine.FindStringSubmatch(line)
			var table int
			fmt.Sscan(m[1], &table)
			h := &st.hops[len(st.hops)-1]
			h.steps = append(h.steps, storyStep{table: table, name: m[2], rest: m[3]})
		}
	}
	if len(st.hops) == 0 || st.verdict == "" {
		t.Fatalf("kovsctl trace printed no hop or no verdict:\n%s", out)
	}
	return st
}

// last is the final table of the trace: on which node, which table.
func (s story) last() (string, storyStep) {
	h := s.hops[len(s.hops)-1]
	if len(h.steps) == 0 {
		return h.node, storyStep{}
	}
	return h.node, h.steps[len(h.steps)-1]
}

// traceCase is one packet: what kovsctl must say about it and what a real probe must do.
type traceCase struct {
	name     string
	src, dst string // pod names in namespace kc
	port     string // "80/tcp"
	allowed  bool
	// where the trace ends: node and table ("90 Output" for delivered packets)
	node, table string
	// hops: 1 when the packet stays on (or dies on) the source node, 2 through the tunnel
	hops int
	// verdict must contain each of these
	says []string
}

func traceCases() []traceCase {
	return []traceCase{
		{name: "allowed same node", src: "client", dst: "db", port: "80/tcp", allowed: true, node: "node1", table: "90 Output", hops: 1,
			says: []string{"delivered on node1 to pod kc/db",
				"NetworkPolicy kc/client-egress egress rule 0 on node1", "NetworkPolicy kc/db-ingress ingress rule 0 on node1"}},
		{name: "allowed across nodes", src: "client", dst: "web", port: "80/tcp", allowed: true, node: "node2", table: "90 Output", hops: 2,
			says: []string{"delivered on node2 to pod kc/web",
				"NetworkPolicy kc/client-egress egress rule 0 on node1", "NetworkPolicy kc/web-ingress ingress rule 0 on node2"}},
		{name: "no policy across nodes", src: "other", dst: "peer", port: "80/tcp", allowed: true, node: "node2", table: "90 Output", hops: 2,
			says: []string{"delivered on node2 to pod kc/peer"}},
		{name: "ingress denied same node", src: "other", dst: "db", port: "80/tcp", node: "node1", table: "70 IngressPolicy", hops: 1,
			says: []string{"DROPPED on node1 in table 70 IngressPolicy", "default deny of kc/db",
				"isolated for ingress by NetworkPolicy kc/db-ingress", "kc/db-ingress ingress rule 0"}},
		{name: "ingress denied across nodes", src: "other", dst: "web", port: "80/tcp", node: "node2", table: "70 IngressPolicy", hops: 2,
			says: []string{"DROPPED on node2 in table 70 IngressPolicy", "default deny of kc/web",
				"isolated for ingress by NetworkPolicy kc/web-ingress", "kc/web-ingress ingress rule 0"}},
		{name: "egress denied same node", src: "client", dst: "other", port: "80/tcp", node: "node1", table: "50 EgressPolicy", hops: 1,
			says: []string{"DROPPED on node1 in table 50 EgressPolicy", "default deny of kc/client",
				"isolated for egress by NetworkPolicy kc/client-egress", "kc/client-egress egress rule 0"}},
		{name: "egress denied across nodes", src: "client", dst: "peer", port: "80/tcp", node: "node1", table: "50 EgressPolicy", hops: 1,
			says: []string{"DROPPED on node1 in table 50 EgressPolicy", "isolated for egress by NetworkPolicy kc/client-egress"}},
		{name: "egress denied by port udp", src: "client", dst: "web", port: "81/udp", node: "node1", table: "50 EgressPolicy", hops: 1,
			says: []string{"DROPPED on node1 in table 50 EgressPolicy", "isolated for egress by NetworkPolicy kc/client-egress"}},
		{name: "no policy sctp", src: "other", dst: "peer", port: "80/sctp", allowed: true, node: "node2", table: "90 Output", hops: 2,
			says: []string{"delivered on node2 to pod kc/peer"}},
		{name: "egress denied sctp", src: "client", dst: "web", port: "80/sctp", node: "node1", table: "50 EgressPolicy", hops: 1,
			says: []string{"DROPPED on node1 in table 50 EgressPolicy", "isolated for egress by NetworkPolicy kc/client-egress"}},
	}
}

// checkTraces traces every case with kovsctl, checks the story, then probes the same
// packet for real: the trace's verdict must be what the packet does.
func (c *cluster) checkTraces(t *testing.T) {
	for _, tc := range traceCases() {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := c.pods[tc.src], c.pods[tc.dst]
			num, proto, _ := strings.Cut(tc.port, "/")
			out := c.mustKovsctl(t, "trace", ns+"/"+tc.src, ns+"/"+tc.dst, "--port", num, "--proto", proto)
			st := parseStory(t, out)
			t.Logf("kovsctl trace %s/%s %s/%s --port %s --proto %s:\n%s", ns, tc.src, ns, tc.dst, num, proto, out)
			if len(st.hops) != tc.hops {
				t.Errorf("trace has %d hops, want %d", len(st.hops), tc.hops)
			}
			if st.hops[0].node != src.Spec.NodeName || st.hops[0].where != "source node" {
				t.Errorf("trace starts on %s (%s), want the source node %s", st.hops[0].node, st.hops[0].where, src.Spec.NodeName)
			}
			wantPacket := fmt.Sprintf("%s %s:40000 -> %s:%s", proto, src.Status.PodIP, dst.Status.PodIP, num)
			if st.hops[0].packet != wantPacket {
				t.Errorf("traced packet %q, want %q", st.hops[0].packet, wantPacket)
			}
			node, step := st.last()
			if node != tc.node || fmt.Sprintf("%d %s", step.table, step.name) != tc.table {
				t.Errorf("trace ends on %s in table %d %s, want %s in %s", node, step.table, step.name, tc.node, tc.table)
			}
			for _, want := range tc.says {
				if !strings.Contains(st.verdict, want) {
					t.Errorf("verdict %q does not say %q", st.verdict, want)
				}
			}
			delivered := strings.HasPrefix(st.verdict, "delivered on ")
			if delivered != tc.allowed {
				t.Errorf("verdict %q: delivered=%v, want %v", st.verdict, delivered, tc.allowed)
			}
			if !tc.allowed && strings.Contains(st.verdict, "allowed by") {
				t.Errorf("verdict of a dropped packet names an allowing rule: %q", st.verdict)
			}
			if len(tc.says) == 1 && strings.Contains(st.verdict, "allowed by") {
				t.Errorf("no policy selects %s or %s, yet the verdict names one: %q", tc.src, tc.dst, st.verdict)
			}
			c.checkProbeAgrees(t, tc, delivered)
		})
	}
}

// checkProbeAgrees sends the traced packet for real from the source pod. A delivered
// packet must connect (and the responder must see the pod's own address); a dropped one
// must get no answer at all, not even a refusal.
func (c *cluster) checkProbeAgrees(t *testing.T, tc traceCase, delivered bool) {
	t.Helper()
	src, dst := c.pods[tc.src], c.pods[tc.dst]
	to := netip.MustParseAddr(dst.Status.PodIP)
	res := c.s.Probe(src, to, tc.port, probeWindow)
	t.Logf("probe %s -> %s %s: %s", tc.src, tc.dst, tc.port, framework.Describe(res))
	switch {
	case delivered && !res.Connected:
		t.Errorf("kovsctl says delivered, the probe: %s", framework.Describe(res))
	case delivered && res.Reply != nil && res.Reply.Peer.Addr().String() != src.Status.PodIP:
		t.Errorf("delivered, but the responder saw source %s, not %s", res.Reply.Peer.Addr(), src.Status.PodIP)
	case !delivered && (res.Connected || res.Refused):
		t.Errorf("kovsctl says dropped, the probe: %s", framework.Describe(res))
	}
}

// checkDestinations: DST as a pod, as its IP, as a node.
func (c *cluster) checkDestinations(t *testing.T) {
	web := c.pods["web"]
	byName := parseStory(t, c.mustKovsctl(t, "trace", "kc/other", "kc/web", "--port", "80"))
	byIP := parseStory(t, c.mustKovsctl(t, "trace", "kc/other", web.Status.PodIP, "--port", "80"))
	if byName.verdict != byIP.verdict || tables(byName) != tables(byIP) {
		t.Errorf("DST kc/web and DST %s tell different stories:\n%s\n%s", web.Status.PodIP, byName.text, byIP.text)
	}
	node2, err := c.s.Client.CoreV1().Nodes().Get(framework.Context(t), "node2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node2IP := internalIP(node2)
	st := parseStory(t, c.mustKovsctl(t, "trace", "kc/other", "node2", "--port", "22"))
	if want := "tcp " + c.pods["other"].Status.PodIP + ":40000 -> " + node2IP + ":22"; st.hops[0].packet != want {
		t.Errorf("DST node2 traced %q, want %q", st.hops[0].packet, want)
	}
	if !strings.Contains(st.verdict, "delivered on node1 to the gateway") {
		t.Errorf("a packet to a node address leaves through the source node's gateway port; verdict %q", st.verdict)
	}
	if _, err := c.kovsctl("trace", "kc/other", "no-such-node"); err == nil {
		t.Errorf("kovsctl trace to a name that is no pod, IP or node succeeded")
	}
}

func tables(s story) string {
	var b strings.Builder
	for _, h := range s.hops {
		fmt.Fprintf(&b, "%s:", h.node)
		for _, st := range h.steps {
			fmt.Fprintf(&b, " %d", st.table)
		}
		b.WriteString("; ")
	}
	return b.String()
}

// checkConntrack: the story says where conntrack answered and with which state; with
// --ct-state trk,est a packet of a connection already established (a reply, for one)
// passes the ingress policy that drops the same packet as a new connection.
func (c *cluster) checkConntrack(t *testing.T) {
	newConn := parseStory(t, c.mustKovsctl(t, "trace", "kc/other", "kc/web", "--port", "80"))
	est := parseStory(t, c.mustKovsctl(t, "trace", "kc/other", "kc/web", "--port", "80", "--ct-state", "trk,est"))
	for _, h := range newConn.hops {
		if len(h.ctStates) == 0 || h.ctStates[0] != "new|trk" {
			t.Errorf("%s: recirculations %v, want one with ct_state=new|trk\n%s", h.node, h.ctStates, newConn.text)
		}
	}
	for _, h := range est.hops {
		if len(h.ctStates) == 0 || h.ctStates[0] != "est|trk" {
			t.Errorf("--ct-state trk,est: %s: recirculations %v, want est|trk\n%s", h.node, h.ctStates, est.text)
		}
	}
	if !strings.HasPrefix(newConn.verdict, "DROPPED on node2 in table 70") || !strings.HasPrefix(est.verdict, "delivered on node2 to pod kc/web") {
		t.Errorf("new connection: %q; established: %q (want dropped, then delivered)", newConn.verdict, est.verdict)
	}
	if _, err := c.kovsctl("trace", "kc/other", "kc/web", "--ct-state", "bogus"); err == nil {
		t.Errorf("--ct-state bogus was accepted")
	}
}

var recircID = regexp.MustCompile(`recirc(_id=|\()0x[0-9a-f]+`)

// checkRaw: --raw prints ofproto/trace's own output, untouched: the same text
// ovs-appctl prints for the flow and --ct-next kovsctl names in the header.
func (c *cluster) checkRaw(t *testing.T) {
	out := c.mustKovsctl(t, "trace", "kc/client", "kc/web", "--port", "80", "--raw")
	header := regexp.MustCompile(`(?m)^--- ovs-appctl ofproto/trace br-int '([^']+)' --ct-next (\S+) ---$`)
	blocks := header.FindAllStringSubmatchIndex(out, -1)
	if len(blocks) != 2 {
		t.Fatalf("--raw across nodes: %d raw traces, want 2 (one per node)\n%s", len(blocks), out)
	}
	st := parseStory(t, out)
	for i, b := range blocks {
		spec, ct := out[b[2]:b[3]], out[b[4]:b[5]]
		end := len(out)
		if i+1 < len(blocks) {
			end = blocks[i+1][0]
		}
		raw := out[b[1]:end]
		if next := strings.Index(raw, "\nverdict: "); next >= 0 {
			raw = raw[:next]
		}
		if next := regexp.MustCompile(`\n\S+ br-int \(after the tunnel\)`).FindStringIndex(raw); next != nil {
			raw = raw[:next[0]]
		}
		node := st.hops[i].node
		direct := c.appctl(t, node, "ofproto/trace", "br-int", spec, "--ct-next", ct)
		if norm(raw) != norm(direct) {
			t.Errorf("%s: --raw differs from ovs-appctl ofproto/trace br-int '%s' --ct-next %s:\n--- kovsctl --raw\n%s\n--- ovs-appctl\n%s", node, spec, ct, raw, direct)
		}
	}
}

func norm(s string) string {
	return strings.TrimSpace(recircID.ReplaceAllString(s, "recirc$1X"))
}

// checkIPv6Traces: the trace cases, with the destination given as its IPv6 address; the
// verdicts are the same as for IPv4 and the probe of the IPv6 packet agrees.
func (c *cluster) checkIPv6Traces(t *testing.T) {
	for _, tc := range traceCases() {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := c.pods[tc.src], c.pods[tc.dst]
			srcIP, dstIP := ipv6Of(t, src), ipv6Of(t, dst)
			num, proto, _ := strings.Cut(tc.port, "/")
			out := c.mustKovsctl(t, "trace", ns+"/"+tc.src, dstIP.String(), "--port", num, "--proto", proto)
			st := parseStory(t, out)
			wantPacket := fmt.Sprintf("%s [%s]:40000 -> [%s]:%s", proto, srcIP, dstIP, num)
			if st.hops[0].packet != wantPacket {
				t.Errorf("traced packet %q, want %q", st.hops[0].packet, wantPacket)
			}
			node, step := st.last()
			if node != tc.node || fmt.Sprintf("%d %s", step.table, step.name) != tc.table {
				t.Errorf("trace ends on %s in table %d %s, want %s in %s\n%s", node, step.table, step.name, tc.node, tc.table, out)
			}
			for _, want := range tc.says {
				if !strings.Contains(st.verdict, want) {
					t.Errorf("verdict %q does not say %q", st.verdict, want)
				}
			}
			delivered := strings.HasPrefix(st.verdict, "delivered on ")
			res := c.s.Probe(src, dstIP, tc.port, probeWindow)
			t.Logf("probe %s -> [%s] %s: %s", tc.src, dstIP, tc.port, framework.Describe(res))
			if delivered != tc.allowed || delivered != res.Connected || (!delivered && res.Refused) {
				t.Errorf("verdict %q (want delivered=%v), probe: %s", st.verdict, tc.allowed, framework.Describe(res))
			}
		})
	}
}

func ipv6Of(t *testing.T, p *corev1.Pod) netip.Addr {
	t.Helper()
	for _, a := range framework.PodIPs(p) {
		if a.Is6() {
			return a
		}
	}
	t.Fatalf("pod %s/%s has no IPv6 address: %v", p.Namespace, p.Name, p.Status.PodIPs)
	return netip.Addr{}
}

// checkOneNodeOnly: on a real node kovsctl reaches only that node's OVS. A cross-node trace
// then tells the source node's story and says where the packet went, instead of failing.
func (c *cluster) checkOneNodeOnly(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink(c.s.Layout.OVSDir("node1"), filepath.Join(dir, "node1")); err != nil {
		t.Fatal(err)
	}
	out, err := c.kovsctlIn(filepath.Join(dir, "{node}"), "trace", "kc/client", "kc/web", "--port", "80")
	if err != nil {
		t.Fatal(err)
	}
	st := parseStory(t, out)
	node2, err := c.s.Client.CoreV1().Nodes().Get(framework.Context(t), "node2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := "sent through the tunnel to node2 (" + internalIP(node2) + "); the rest of the path is not traced"
	if len(st.hops) != 1 || st.hops[0].node != "node1" || !strings.HasPrefix(st.verdict, want) {
		t.Errorf("with only node1's OVS: %d hops, verdict %q; want node1's hop and %q\n%s", len(st.hops), st.verdict, want, out)
	}
	if _, step := st.last(); step.name != "Output" {
		t.Errorf("node1's story ends in %s, want Output (the tunnel port)", step.name)
	}
}

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}
