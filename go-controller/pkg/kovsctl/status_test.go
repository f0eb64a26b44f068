package kovsctl

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/nodestatus"
)

func healthyReport() NodeReport {
	connected := true
	return NodeReport{
		Node: "node1",
		Agent: &nodestatus.Status{Node: "node1", Live: true, Ready: true,
			Checks: []nodestatus.Check{{Name: "ovs", OK: true}, {Name: "flows", OK: true}},
			Flows:  nodestatus.Flows{Installed: 70, DesiredGeneration: 9, InstalledGeneration: 9},
			Peers:  []nodestatus.Peer{{Node: "node2", TunnelIP: "172.30.0.2"}},
			Policy: &nodestatus.Policy{Received: true, Connected: &connected, ReceivedGeneration: 5, RealizedGeneration: 5}},
		OVS:           OVSReport{DatabaseOK: true, BridgeOK: true, VswitchdOK: true, TunnelOK: true, GatewayOK: true, Flows: 70},
		ExpectedPeers: []string{"node2"},
	}
}

func TestProblems(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(r *NodeReport)
		want   []string // substrings, one per problem
	}{
		{"healthy", func(*NodeReport) {}, nil},
		{"vswitchd down", func(r *NodeReport) {
			r.OVS.VswitchdOK, r.OVS.Error, r.OVS.Flows = false, "connecting: no such file", 0
		}, []string{"ovs-vswitchd does not answer"}},
		{"agent unreachable", func(r *NodeReport) { r.Agent, r.AgentError = nil, "connection refused" },
			[]string{"agent: connection refused"}},
		{"flows drift", func(r *NodeReport) { r.OVS.Flows = 12 }, []string{"flows out of sync: the agent installed 70, br-int has 12"}},
		{"missing peer", func(r *NodeReport) { r.ExpectedPeers = append(r.ExpectedPeers, "node3") }, []string{"no tunnel peer for node node3"}},
		{"policy behind", func(r *NodeReport) { r.Agent.Policy.RealizedGeneration = 4 }, []string{"NetworkPolicy behind: received generation 5, realized 4"}},
		{"not ready", func(r *NodeReport) {
			r.Agent.Ready, r.Agent.Checks[1] = false, nodestatus.Check{Name: "flows", Message: "last flow sync failed"}
		}, []string{"agent not ready: flows: last flow sync failed"}},
		{"tunnel port gone", func(r *NodeReport) { r.OVS.TunnelOK = false }, []string{"tunnel port kovs-tun0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := healthyReport()
			c.mutate(&r)
			got := problems(r)
			if len(got) != len(c.want) {
				t.Fatalf("problems = %q, want %d", got, len(c.want))
			}
			for i, w := range c.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d = %q, want it to say %q", i, got[i], w)
				}
			}
		})
	}
}

func TestPrintNamesEveryProblemUnderItsNode(t *testing.T) {
	bad := healthyReport()
	bad.Node, bad.OVS.VswitchdOK, bad.OVS.Error = "node2", false, "gone"
	bad.Problems = problems(bad)
	good := healthyReport()
	good.Problems = problems(good)
	st := &Status{OK: false, Nodes: []NodeReport{good, bad}}
	var out bytes.Buffer
	if err := st.Print(&out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"node1  ready", "vswitchd-down", "node2: ovs-vswitchd does not answer: gone", "1/1 (node2)"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "node1:") {
		t.Errorf("a healthy node has a problem line:\n%s", text)
	}
}
