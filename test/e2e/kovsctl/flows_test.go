package kovsctl_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// kovsctlFlows is `kovsctl flows` read back: the flows under each "# table N Name" header.
type kovsctlFlows struct {
	names map[int]string // table number -> the name in the header
	flows []ovs.FlowEntry
}

var (
	tableHeader = regexp.MustCompile(`^# table (\d+) (\S+)$`)
	flowLine    = regexp.MustCompile(`^\s+n_packets=\d+\s+(.*)$`)
)

func parseFlows(t *testing.T, out string) kovsctlFlows {
	t.Helper()
	res := kovsctlFlows{names: map[int]string{}}
	table := -1
	for _, line := range strings.Split(out, "\n") {
		switch {
		case tableHeader.MatchString(line):
			m := tableHeader.FindStringSubmatch(line)
			table, _ = strconv.Atoi(m[1])
			res.names[table] = m[2]
		case flowLine.MatchString(line):
			f, err := ovs.ParseFlow(flowLine.FindStringSubmatch(line)[1])
			if err != nil {
				t.Fatalf("kovsctl flows printed %q: %v", line, err)
			}
			if f.Table != table {
				t.Fatalf("flow %q listed under table %d", line, table)
			}
			res.flows = append(res.flows, f)
		}
	}
	return res
}

// dumpFlows is ovs-ofctl dump-flows of a node's br-int.
func (c *cluster) dumpFlows(t *testing.T, node string) []ovs.FlowEntry {
	t.Helper()
	flows, err := ovs.ParseFlowDump(c.ofctl(t, node, "dump-flows", "BRIDGE"))
	if err != nil {
		t.Fatal(err)
	}
	return flows
}

// key is a flow without its counters.
func key(f ovs.FlowEntry) string {
	f.Packets, f.Bytes = 0, 0
	return f.String()
}

func keys(flows []ovs.FlowEntry) []string {
	var out []string
	for _, f := range flows {
		out = append(out, key(f))
	}
	slices.Sort(out)
	return out
}

func perTable(flows []ovs.FlowEntry) map[int]int {
	n := map[int]int{}
	for _, f := range flows {
		n[f.Table]++
	}
	return n
}

// agree polls until kovsctl's flows and ovs-ofctl's agree (the agent may replace flows
// between the two dumps), and fails with the last difference.
func (c *cluster) agree(t *testing.T, what string, kovsctlArgs []string, want func(all []ovs.FlowEntry) []ovs.FlowEntry) kovsctlFlows {
	t.Helper()
	var got kovsctlFlows
	framework.Eventually(t, 10*time.Second, what, func() error {
		out, err := c.kovsctl(kovsctlArgs...)
		if err != nil {
			return err
		}
		got = parseFlows(t, out)
		node := kovsctlArgs[slices.Index(kovsctlArgs, "--node")+1]
		exp := want(c.dumpFlows(t, node))
		if g, w := perTable(got.flows), perTable(exp); !maps.Equal(g, w) {
			return fmt.Errorf("flows per table: kovsctl %v, ovs-ofctl %v", g, w)
		}
		if g, w := keys(got.flows), keys(exp); !slices.Equal(g, w) {
			return fmt.Errorf("flows differ:\nkovsctl:\n%s\nexpected from ovs-ofctl:\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"))
		}
		if len(exp) == 0 && !strings.Contains(out, "no flow of "+node+"'s br-int matches") {
			return fmt.Errorf("no flow selected, and kovsctl does not say so:\n%s", out)
		}
		return nil
	})
	return got
}

// checkFlows: `kovsctl flows` shows what ovs-ofctl dump-flows shows, table by table, under
// the tables' names; --table keeps one table.
func (c *cluster) checkFlows(t *testing.T) {
	for _, node := range []string{"node1", "node2"} {
		got := c.agree(t, node+" all flows", []string{"flows", "--node", node}, func(all []ovs.FlowEntry) []ovs.FlowEntry { return all })
		for id, name := range got.names {
			if tbl, ok := pipeline.TableByID(uint8(id)); !ok || tbl.Name != name {
				t.Errorf("%s: header names table %d %q, the pipeline declares %v", node, id, name, tbl)
			}
		}
		for _, tbl := range []pipeline.Table{pipeline.Classifier, pipeline.EgressPolicy, pipeline.L3Forwarding, pipeline.IngressPolicy, pipeline.Output} {
			if _, ok := got.names[int(tbl.ID)]; !ok {
				t.Errorf("%s: no flows under table %s (it has at least its miss flow)", node, tbl)
			}
		}
		for _, sel := range []string{"IngressPolicy", "70", "ingresspolicy"} {
			c.agree(t, node+" --table "+sel, []string{"flows", "--node", node, "--table", sel}, func(all []ovs.FlowEntry) []ovs.FlowEntry {
				return slices.DeleteFunc(all, func(f ovs.FlowEntry) bool { return f.Table != int(pipeline.IngressPolicy.ID) })
			})
		}
	}
}

// podPort is a pod's OVS interface as ovs-vsctl shows it.
type podPort struct {
	name   string
	ofport int
	ids    map[string]string
}

// podPorts lists a node's pod interfaces with ovs-vsctl, by "ns/name".
func (c *cluster) podPorts(t *testing.T, node string) map[string]podPort {
	t.Helper()
	out := c.vsctl(t, node, "--format=json", "--columns=name,ofport,external_ids", "find", "Interface", "external_ids:kovs.io/owner=pod")
	var table struct {
		Data [][]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &table); err != nil {
		t.Fatalf("ovs-vsctl json: %v\n%s", err, out)
	}
	ports := map[string]podPort{}
	for _, row := range table.Data {
		var p podPort
		var pairs [][2]string
		var raw []json.RawMessage // ["map", [[key, value], ...]]
		if err := json.Unmarshal(row[0], &p.name); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(row[1], &p.ofport); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(row[2], &raw); err != nil || len(raw) != 2 {
			t.Fatalf("external_ids %s: %v", row[2], err)
		}
		if err := json.Unmarshal(raw[1], &pairs); err != nil {
			t.Fatalf("external_ids %s: %v", row[2], err)
		}
		p.ids = map[string]string{}
		for _, kv := range pairs {
			p.ids[kv[0]] = kv[1]
		}
		ports[p.ids["kovs.io/pod-namespace"]+"/"+p.ids["kovs.io/pod-name"]] = p
	}
	return ports
}

// checkPodFilter: --pod selects exactly the flows that reference the pod: owned by it
// (cookie), or matching its port (in_port, reg1), its addresses or its MAC.
func (c *cluster) checkPodFilter(t *testing.T) {
	for _, name := range []string{"client", "web"} {
		pod := c.pods[name]
		node := pod.Spec.NodeName
		port, ok := c.podPorts(t, node)[ns+"/"+name]
		if !ok {
			t.Fatalf("ovs-vsctl shows no interface for %s/%s on %s", ns, name, node)
		}
		values := map[string]bool{pod.Status.PodIP: true, port.ids["kovs.io/mac"]: true}
		references := func(f ovs.FlowEntry) bool {
			ck := pipeline.Cookie(f.Cookie)
			if ck.Object() == uint32(port.ofport) && (ck.Category() == pipeline.CategoryPod ||
				ck.PolicyKind() == pipeline.PolicyKindIngressDeny || ck.PolicyKind() == pipeline.PolicyKindEgressDeny) {
				return true
			}
			for _, tok := range strings.Split(f.Match, ",") {
				k, v, _ := strings.Cut(tok, "=")
				switch k {
				case "in_port", "reg1":
					if n, err := strconv.ParseUint(v, 0, 32); err == nil && int(n) == port.ofport {
						return true
					}
				default:
					if values[v] {
						return true
					}
				}
			}
			return false
		}
		got := c.agree(t, node+" --pod "+name, []string{"flows", "--node", node, "--pod", ns + "/" + name}, func(all []ovs.FlowEntry) []ovs.FlowEntry {
			return slices.DeleteFunc(all, func(f ovs.FlowEntry) bool { return !references(f) })
		})
		// The pod's own flows are there in every stage that knows pods.
		for _, tbl := range []pipeline.Table{pipeline.Classifier, pipeline.SpoofGuard, pipeline.ARPResponder, pipeline.L3Forwarding} {
			if perTable(got.flows)[int(tbl.ID)] == 0 {
				t.Errorf("--pod %s on %s: no flow in %s", name, node, tbl)
			}
		}
		if _, err := c.kovsctl("flows", "--node", otherNode(node), "--pod", ns+"/"+name); err == nil {
			t.Errorf("--pod %s on %s, where it has no port, succeeded", name, otherNode(node))
		}
	}
	// client is isolated for egress: its default deny is among its flows.
	client := c.podPorts(t, "node1")[ns+"/client"]
	out := c.mustKovsctl(t, "flows", "--node", "node1", "--pod", ns+"/client", "--table", "EgressPolicy")
	if !regexp.MustCompile(fmt.Sprintf(`table=50, priority=\d+,in_port=%d actions=drop`, client.ofport)).MatchString(out) {
		t.Errorf("--pod kc/client --table EgressPolicy shows no default deny of its port %d:\n%s", client.ofport, out)
	}
}

func otherNode(n string) string {
	if n == "node1" {
		return "node2"
	}
	return "node1"
}

var conjunctionOf = regexp.MustCompile(`conjunction\((\d+),`)

// checkPolicyFilter: --policy selects the policy's rule flows (cookie object the rule ID
// hash), the clauses of their conjunctions, and the default denies of the pods it isolates;
// on a node where it protects no pod, nothing.
func (c *cluster) checkPolicyFilter(t *testing.T) {
	cases := []struct {
		policy, rule string
		deny         pipeline.PolicyKind
		isolates     string // pod name
	}{
		{"web-ingress", "kc/web-ingress/ingress/0", pipeline.PolicyKindIngressDeny, "web"},
		{"db-ingress", "kc/db-ingress/ingress/0", pipeline.PolicyKindIngressDeny, "db"},
		{"client-egress", "kc/client-egress/egress/0", pipeline.PolicyKindEgressDeny, "client"},
	}
	for _, tc := range cases {
		obj := pipeline.PolicyRuleObjectID(tc.rule)
		for _, node := range []string{"node1", "node2"} {
			isolatedPort, local := c.podPorts(t, node)[ns+"/"+tc.isolates]
			want := func(all []ovs.FlowEntry) []ovs.FlowEntry {
				conj := map[string]bool{}
				for _, f := range all {
					ck := pipeline.Cookie(f.Cookie)
					if ck.PolicyKind() == pipeline.PolicyKindRule && ck.Object() == obj {
						for _, tok := range strings.Split(f.Match, ",") {
							if v, ok := strings.CutPrefix(tok, "conj_id="); ok {
								conj[v] = true
							}
						}
					}
				}
				return slices.DeleteFunc(all, func(f ovs.FlowEntry) bool {
					ck := pipeline.Cookie(f.Cookie)
					if ck.Category() != pipeline.CategoryPolicy {
						return true
					}
					if ck.Object() == obj && (ck.PolicyKind() == pipeline.PolicyKindRule || ck.PolicyKind() == pipeline.PolicyKindClause) {
						return false
					}
					for _, m := range conjunctionOf.FindAllStringSubmatch(f.Actions, -1) {
						if conj[m[1]] {
							return false
						}
					}
					return !(local && ck.PolicyKind() == tc.deny && ck.Object() == uint32(isolatedPort.ofport))
				})
			}
			got := c.agree(t, node+" --policy "+tc.policy, []string{"flows", "--node", node, "--policy", ns + "/" + tc.policy}, want)
			if local && len(got.flows) < 2 {
				t.Errorf("%s on %s, where it isolates %s: %d flows, want at least the rule and the default deny", tc.policy, node, tc.isolates, len(got.flows))
			}
			if !local && len(got.flows) != 0 {
				t.Errorf("%s on %s, where it isolates no pod: %d flows", tc.policy, node, len(got.flows))
			}
		}
	}
}

// checkPods: `kovsctl pods` shows the pod ports ovs-vsctl shows (port, ofport, identity)
// and the addresses and UIDs the API has for the pods of that node.
func (c *cluster) checkPods(t *testing.T) {
	for _, node := range []string{"node1", "node2"} {
		out := c.mustKovsctl(t, "pods", "--node", node)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if got := strings.Fields(lines[0]); !slices.Equal(got, []string{"POD", "PORT", "OFPORT", "ADDRESSES", "MAC", "UID", "SANDBOX"}) {
			t.Fatalf("kovsctl pods header %q", lines[0])
		}
		ports := c.podPorts(t, node)
		seen := map[string]bool{}
		for _, line := range lines[1:] {
			f := strings.Fields(line)
			if len(f) != 7 {
				t.Errorf("kovsctl pods line %q: %d columns", line, len(f))
				continue
			}
			name := f[0]
			seen[name] = true
			p, ok := ports[name]
			if !ok {
				t.Errorf("kovsctl pods lists %s on %s, ovs-vsctl has no such interface", name, node)
				continue
			}
			if f[1] != p.name || f[2] != strconv.Itoa(p.ofport) || f[4] != p.ids["kovs.io/mac"] || f[5] != p.ids["kovs.io/pod-uid"] ||
				!strings.HasPrefix(p.ids["kovs.io/sandbox"], f[6]) {
				t.Errorf("kovsctl pods %q, ovs-vsctl: %s ofport %d %v", line, p.name, p.ofport, p.ids)
			}
			_, podName, _ := strings.Cut(name, "/")
			api, ok := c.pods[podName]
			if !ok {
				t.Errorf("kovsctl pods lists %s, which the test did not create", name)
				continue
			}
			if api.Spec.NodeName != node || string(api.UID) != f[5] {
				t.Errorf("%s: kovsctl says node %s uid %s, the API %s %s", name, node, f[5], api.Spec.NodeName, api.UID)
			}
			var addrs []string
			for _, a := range strings.Split(f[3], ",") {
				if pfx, err := netip.ParsePrefix(a); err == nil {
					addrs = append(addrs, pfx.Addr().String())
				}
			}
			var apiIPs []string
			for _, ip := range api.Status.PodIPs {
				apiIPs = append(apiIPs, ip.IP)
			}
			if !slices.Equal(addrs, apiIPs) {
				t.Errorf("%s: kovsctl addresses %v, the API's pod IPs %v", name, addrs, apiIPs)
			}
		}
		for name, p := range c.pods {
			if p.Spec.NodeName == node && !seen[ns+"/"+name] {
				t.Errorf("kovsctl pods --node %s misses %s/%s (ovs-vsctl: %v)", node, ns, name, ports[ns+"/"+name])
			}
		}
		if len(seen) != len(ports) {
			t.Errorf("kovsctl pods lists %d pods on %s, ovs-vsctl %d", len(seen), node, len(ports))
		}
	}
}
