package agent_test

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/agent"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovsfake"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// A throwaway stage, as a new feature would add one: its own table, its own cookie
// category, and objects of its own. It keeps UDP to port 4242 away from every local pod:
// ServiceLB sends such packets to its table, which drops them for each pod.
const (
	throwawayCategory pipeline.Category = 10
	blockedPort       uint16            = 4242
)

var throwawayTable = pipeline.Table{ID: 42, Name: "Throwaway", Phase: pipeline.PhaseServiceLB, Miss: pipeline.MissDrop}

func throwawayStage() pipeline.Stage {
	udp := pipeline.MatchProtocol(pipeline.ProtoUDP).TpDst(blockedPort, 0xffff)
	return pipeline.Stage{Name: "throwaway", Category: throwawayCategory, Tables: []pipeline.Table{throwawayTable},
		Objects: func(s *pipeline.Snapshot) []pipeline.Object {
			objs := []pipeline.Object{{Key: "divert", Compile: func(b *pipeline.Builder) (pipeline.ObjectFlows, error) {
				return pipeline.ObjectFlows{Flows: []pipeline.Flow{{Table: pipeline.ServiceLB, Priority: 250,
					Cookie: b.Cookie(throwawayCategory, 0), Match: udp, Actions: []pipeline.Action{pipeline.Goto(throwawayTable)}}}}, nil
			}}}
			for _, pod := range s.Pods {
				ofport := pod.OFPort
				objs = append(objs, pipeline.Object{Key: strconv.Itoa(int(ofport)), Input: ofport,
					Compile: func(b *pipeline.Builder) (pipeline.ObjectFlows, error) {
						return pipeline.ObjectFlows{Flows: []pipeline.Flow{{Table: throwawayTable, Priority: 100,
							Cookie: b.Cookie(throwawayCategory, ofport), Match: udp.Reg(pipeline.OutPortField.Mark(ofport)),
							Actions: []pipeline.Action{pipeline.Drop{}}}}}, nil
					}})
			}
			return objs
		}}
}

func node() pipeline.NodeConfig {
	return pipeline.NodeConfig{
		Name: "node-1", GatewayMAC: net.HardwareAddr{0x0a, 0x58, 0x0a, 0xf4, 0x01, 0x01},
		GatewayIPs: []netip.Addr{netip.MustParseAddr("10.244.1.1")}, PodSubnets: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, TunnelOFPort: 1, GatewayOFPort: 2,
		UnderlayIPs: []netip.Addr{netip.MustParseAddr("172.31.0.1")},
	}
}

func pod(name string, ofport uint32, host byte) pipeline.PodPort {
	return pipeline.PodPort{Namespace: "x", Name: name, UID: "uid-" + name, OFPort: ofport,
		MAC: net.HardwareAddr{0x0a, 0x58, 0x0a, 0xf4, 0x01, host}, IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 244, 1, host})}}
}

// TestAThrowawayStageIsTracedRenderedAndSynced: one registry line adds the stage; the
// compilation, the invariants, the tracer, the rendering and the agent's flow sync take
// it up without being told.
func TestAThrowawayStageIsTracedRenderedAndSynced(t *testing.T) {
	stages := pipeline.Stages().With(throwawayStage()) // the one registry line
	if err := stages.Validate(); err != nil {
		t.Fatal(err)
	}
	a, b := pod("a", 3, 10), pod("b", 4, 11)
	snap := pipeline.Snapshot{Node: node(), Round: 1, Pods: []pipeline.PodPort{a, b}}
	compiled, err := stages.Compile(snap)
	if err != nil {
		t.Fatal(err)
	}
	if problems := stages.Check(compiled, 1); len(problems) > 0 {
		t.Fatalf("invariants: %s", strings.Join(problems, "\n"))
	}

	// Traced: UDP 4242 from a to b ends in the stage's table; UDP 4243 reaches b.
	tracer := pipeline.NewTracer(compiled.Flows)
	udp := func(port uint16) pipeline.Packet {
		return pipeline.Packet{InPort: a.OFPort, EthSrc: a.MAC, EthDst: node().GatewayMAC, EthType: pipeline.EthTypeIPv4,
			IPSrc: a.IPs[0], IPDst: b.IPs[0], IPProto: pipeline.IPProtoUDP, TTL: 64, SrcPort: 40000, DstPort: port}
	}
	r, err := tracer.Trace(udp(blockedPort), pipeline.CTNew)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Dropped() || r.Steps[len(r.Steps)-1].Table != throwawayTable {
		t.Errorf("UDP %d: want dropped in %s, got:\n%s", blockedPort, throwawayTable.Name, r)
	}
	if r, err := tracer.Trace(udp(blockedPort+1), pipeline.CTNew); err != nil || r.Dropped() || slices.Contains(r.TableNames(), throwawayTable.Name) {
		t.Errorf("UDP %d: want delivered past the stage (%v):\n%s", blockedPort+1, err, r)
	}

	// Rendered: the flow file names the stage's table, and its flows carry its cookie.
	text := stages.FormatByTable(compiled.Flows)
	if !strings.Contains(text, "# table 42 Throwaway (stage: service load balancing; miss: drop)\n") ||
		!strings.Contains(text, "cookie=0x10a0000000003, table=42, priority=100,udp,reg1=0x3,tp_dst=4242 actions=drop\n") {
		t.Errorf("flow file lacks the stage's table or flows:\n%s", text)
	}

	// Synced: the agent installs the stage's flows, and a pod that goes takes its flow.
	of := ovsfake.NewOpenFlow()
	state := agent.NewNodeStateOf(stages, 1, nil)
	syncer := agent.NewFlowSyncerOf(stages, agent.OpenFlowSwitch(of), state.Desired, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go syncer.Run(ctx)
	state.SetNode(node())
	state.SetPod("veth-a", a)
	gen := state.SetPod("veth-b", b)
	wait := func(gen uint64) {
		t.Helper()
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		defer wcancel()
		if err := syncer.WaitFor(wctx, gen); err != nil {
			t.Fatal(err)
		}
	}
	wait(gen)
	if got := stageFlows(of); len(got) != 4 { // the divert, a miss and one per pod
		t.Fatalf("switch holds %d of the stage's flows, want 4:\n%s", len(got), strings.Join(got, "\n"))
	}
	wait(state.DeletePod("veth-a"))
	got := stageFlows(of)
	if len(got) != 3 || slices.ContainsFunc(got, func(f string) bool { return strings.Contains(f, "reg1=0x3,") }) {
		t.Errorf("after pod a left, the switch holds:\n%s", strings.Join(got, "\n"))
	}
}

// stageFlows are the switch's flows in the stage's table or with its cookie.
func stageFlows(of *ovsfake.OpenFlow) []string {
	var out []string
	for _, e := range of.Flows() {
		if e.Table == int(throwawayTable.ID) || pipeline.Cookie(e.Cookie).Category() == throwawayCategory {
			out = append(out, e.String())
		}
	}
	return out
}
