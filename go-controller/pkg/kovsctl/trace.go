package kovsctl

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// Protocols kovsctl trace can build packets for.
var protocols = map[string]bool{"tcp": true, "udp": true, "sctp": true, "icmp": true}

// TraceRequest is what `kovsctl trace` was asked.
type TraceRequest struct {
	Src, Dst string
	Proto    string
	Port     int
	// CtState is the conntrack state the trace continues with after each ct() action
	// (ofproto/trace --ct-next): "trk,new" (default) for the first packet of a
	// connection, "trk,est" for a packet of a connection conntrack already knows.
	CtState string
	Raw     bool
}

// DefaultCtState is the conntrack state of the first packet of a connection.
const DefaultCtState = "trk,new"

// Hop is the trace on one node.
type Hop struct {
	Node   string
	Packet pipeline.Packet
	Raw    string
	Parsed ovs.Trace
	ports  map[int]string // ofport -> what it is
}

// TraceResult is the whole path.
type TraceResult struct {
	Request TraceRequest
	Hops    []Hop
	Verdict string
	// Note says what the trace could not find out (the NetworkPolicy rules' names).
	Note   string
	owners cookieOwners
}

// Trace builds the packet, traces it on the source node's br-int and, when it leaves
// through the tunnel, on the destination node's after the tunnel.
func (a Access) Trace(ctx context.Context, req TraceRequest) (*TraceResult, error) {
	if !protocols[req.Proto] {
		return nil, fmt.Errorf("--proto %q: use tcp, udp, sctp or icmp", req.Proto)
	}
	if req.CtState == "" {
		req.CtState = DefaultCtState
	}
	if err := checkCtState(req.CtState); err != nil {
		return nil, err
	}
	src, err := a.srcPod(ctx, req.Src)
	if err != nil {
		return nil, err
	}
	dst, err := a.dst(ctx, req.Dst)
	if err != nil {
		return nil, err
	}
	nodes, err := a.nodes(ctx)
	if err != nil {
		return nil, err
	}
	pkt, err := a.firstPacket(ctx, src, dst, nodes, req)
	if err != nil {
		return nil, err
	}
	res := &TraceResult{Request: req, owners: cookieOwners{nodes: nodes}}
	if res.owners.rules, err = a.listPolicyRules(ctx, req.Proto, req.Port); err != nil {
		res.Note = err.Error()
	} else if err := a.listClusterRules(ctx, res.owners.rules, req.Proto, req.Port); err != nil {
		res.Note = err.Error()
	}
	if res.owners.services, err = a.listServiceNames(ctx); err != nil {
		res.Note = strings.Join(slices.DeleteFunc([]string{res.Note, err.Error()}, func(s string) bool { return s == "" }), "; ")
	}
	hop, err := a.traceOn(ctx, src.Node, pkt, req.CtState)
	if err != nil {
		return nil, err
	}
	res.Hops = append(res.Hops, hop)
	if tun := hop.Parsed.TunnelDst; tun != "" {
		next, ok := nodeByUnderlay(nodes, tun)
		if !ok {
			res.Verdict = "sent through the tunnel to " + tun + ", which is no node's address"
			return res, nil
		}
		if err := a.reachable(next.Name); err != nil {
			// On a real node only the local OVS is reachable: the source half is still
			// the story of everything this node decided.
			res.Verdict = fmt.Sprintf("sent through the tunnel to %s (%s); the rest of the path is not traced: %v", next.Name, tun, err)
			return res, nil
		}
		second := a.afterTunnel(pkt, nodes[src.Node], next)
		hop2, err := a.traceOn(ctx, next.Name, second, req.CtState)
		if err != nil {
			return nil, err
		}
		res.Hops = append(res.Hops, hop2)
	}
	a.explainDeny(ctx, res)
	res.Verdict = res.verdict()
	if req.CtState != DefaultCtState {
		res.Verdict += " (traced with ct_state " + req.CtState + ", not as a new connection)"
	}
	return res, nil
}

// checkCtState accepts what ofproto/trace --ct-next takes: flags of ct_state, separated
// by commas or "|".
func checkCtState(s string) error {
	known := map[string]bool{"trk": true, "new": true, "est": true, "rel": true, "rpl": true, "inv": true, "snat": true, "dnat": true}
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '|' }) {
		if !known[f] {
			return fmt.Errorf("--ct-state %q: %q is no conntrack state flag (trk, new, est, rel, rpl, inv)", s, f)
		}
	}
	return nil
}

// explainDeny looks up, when the packet ended in a pod's default deny, which
// NetworkPolicies isolate that pod in that direction, so the verdict can name them.
func (a Access) explainDeny(ctx context.Context, res *TraceResult) {
	last := res.Hops[len(res.Hops)-1]
	step, ok := last.Parsed.LastStep()
	if !ok || !last.Parsed.Dropped() {
		return
	}
	dir := networkingv1.PolicyTypeIngress
	switch pipeline.Cookie(step.Cookie).PolicyKind() {
	case pipeline.PolicyKindIngressDeny:
	case pipeline.PolicyKindEgressDeny:
		dir = networkingv1.PolicyTypeEgress
	default:
		return
	}
	pod, ok := strings.CutPrefix(last.ports[int(pipeline.Cookie(step.Cookie).Object())], "pod ")
	if !ok {
		return
	}
	ns, name, _ := strings.Cut(pod, "/")
	iso, err := a.isolationOf(ctx, ns, name, dir)
	if err != nil {
		res.Note = fmt.Sprintf("could not read the NetworkPolicies of %s: %v", pod, err)
		return
	}
	d := strings.ToLower(string(dir))
	if res.owners.isolation == nil {
		res.owners.isolation = map[string]string{}
	}
	res.owners.isolation[pod+" "+d] = iso.describe(d)
}

// firstPacket is the packet as the source pod sends it: to its gateway's MAC.
func (a Access) firstPacket(ctx context.Context, src, dst *endpoint, nodes map[string]nodeInfo, req TraceRequest) (pipeline.Packet, error) {
	if len(dst.IPs) == 0 {
		return pipeline.Packet{}, fmt.Errorf("destination %s has no address yet", dst.Name)
	}
	var srcIP, dstIP netip.Addr
	for _, d := range dst.IPs {
		if s, ok := sameFamily(src.IPs, d); ok {
			srcIP, dstIP = s, d
			break
		}
	}
	if !srcIP.IsValid() {
		return pipeline.Packet{}, fmt.Errorf("%s (%v) and %s (%v) share no address family", src.Name, src.IPs, dst.Name, dst.IPs)
	}
	ofport, err := a.podOFPort(ctx, src)
	if err != nil {
		return pipeline.Packet{}, err
	}
	gw := nodes[src.Node].GatewayMAC
	if gw == nil {
		return pipeline.Packet{}, fmt.Errorf("node %s has no kovs subnets yet", src.Node)
	}
	return newPacket(req.Proto, uint32(ofport), src.MAC, gw, srcIP, dstIP, uint16(req.Port)), nil
}

// newPacket is the first packet of a connection of proto (tcp, udp, sctp, or icmp: an
// echo request) from port 40000 to port, with TTL 64.
func newPacket(proto string, inPort uint32, srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr, port uint16) pipeline.Packet {
	p := pipeline.Packet{InPort: inPort, EthSrc: srcMAC, EthDst: dstMAC, EthType: pipeline.EthTypeIPv4,
		IPSrc: src, IPDst: dst, TTL: 64, SrcPort: 40000, DstPort: port}
	if src.Is6() {
		p.EthType = pipeline.EthTypeIPv6
	}
	switch proto {
	case "icmp":
		p.SrcPort, p.DstPort = 0, 0
		p.IPProto, p.ICMPType = pipeline.IPProtoICMP, 8
		if src.Is6() {
			p.IPProto, p.ICMPType = pipeline.IPProtoICMP6, 128
		}
	case "udp":
		p.IPProto = pipeline.IPProtoUDP
	case "sctp":
		p.IPProto = pipeline.IPProtoSCTP
	default:
		p.IPProto = pipeline.IPProtoTCP
	}
	return p
}

// describePacket is the packet for people: "tcp 10.244.0.2:40000 -> 10.244.1.3:80".
func describePacket(p pipeline.Packet) string {
	switch p.IPProto {
	case pipeline.IPProtoICMP, pipeline.IPProtoICMP6:
		return fmt.Sprintf("icmp echo %s -> %s", p.IPSrc, p.IPDst)
	}
	proto := map[uint8]string{pipeline.IPProtoTCP: "tcp", pipeline.IPProtoUDP: "udp", pipeline.IPProtoSCTP: "sctp"}[p.IPProto]
	return fmt.Sprintf("%s %s -> %s", proto, netip.AddrPortFrom(p.IPSrc, p.SrcPort), netip.AddrPortFrom(p.IPDst, p.DstPort))
}

// afterTunnel is the packet as the destination node receives it: routed once (TTL and MACs
// rewritten by the source node), inside Geneve from the source node's endpoint.
func (a Access) afterTunnel(p pipeline.Packet, from, to nodeInfo) pipeline.Packet {
	next := p
	next.InPort = tunnelOFPort
	next.EthSrc, next.EthDst = from.GatewayMAC, to.GatewayMAC
	next.TTL = p.TTL - 1
	next.TunID = pipeline.TunnelVNI
	for _, u := range to.Underlay {
		if s, ok := sameFamily(from.Underlay, u); ok {
			next.TunSrc, next.TunDst = s, u
			break
		}
	}
	return next
}

// tunnelOFPort is the Geneve port's fixed OpenFlow number on br-int.
const tunnelOFPort = 1

func (a Access) traceOn(ctx context.Context, node string, p pipeline.Packet, ctState string) (Hop, error) {
	o, err := a.connect(ctx, node)
	if err != nil {
		return Hop{}, err
	}
	defer o.Close()
	raw, err := o.of.Trace(ctx, p.TraceFlow(), "--ct-next", ctState)
	if err != nil {
		return Hop{}, err
	}
	ports, err := portNames(ctx, o.db)
	if err != nil {
		return Hop{}, err
	}
	return Hop{Node: node, Packet: p, Raw: raw, Parsed: ovs.ParseTrace(raw, Bridge), ports: ports}, nil
}

func (a Access) podOFPort(ctx context.Context, src *endpoint) (int, error) {
	o, err := a.connect(ctx, src.Node)
	if err != nil {
		return 0, err
	}
	defer o.Close()
	ifaceID := src.Pod.Namespace + "_" + src.Pod.Name
	ports, err := o.db.FindPorts(ctx, Bridge, "iface-id", ifaceID)
	if err != nil {
		return 0, err
	}
	for _, p := range ports {
		if p.Ofport > 0 {
			return p.Ofport, nil
		}
	}
	return 0, fmt.Errorf("pod %s has no OVS port on %s's %s (iface-id=%s): is its sandbox running?", src.Name, src.Node, Bridge, ifaceID)
}

// portNames maps ofports to what they are: a pod, the gateway, the tunnel.
func portNames(ctx context.Context, db ovs.Store) (map[int]string, error) {
	ports, err := db.Ports(ctx, Bridge)
	if err != nil {
		return nil, err
	}
	out := map[int]string{}
	for _, p := range ports {
		ids := p.ExternalIDs
		switch ids["kovs.io/owner"] {
		case "pod":
			out[p.Ofport] = "pod " + ids["kovs.io/pod-namespace"] + "/" + ids["kovs.io/pod-name"]
		case "gateway":
			out[p.Ofport] = "the gateway (" + p.Name + ", the node's network stack)"
		case "tunnel":
			out[p.Ofport] = "the tunnel (" + p.Name + ")"
		default:
			out[p.Ofport] = "port " + p.Name
		}
	}
	return out, nil
}

func (r *TraceResult) verdict() string {
	last := r.Hops[len(r.Hops)-1]
	switch {
	case last.Parsed.ReturnedToSender():
		return "answered by OVS on " + last.Node
	case last.Parsed.Dropped():
		step, ok := last.Parsed.LastStep()
		if !ok {
			return "dropped on " + last.Node + " before any flow"
		}
		return fmt.Sprintf("DROPPED on %s in table %d %s by %s", last.Node, step.Table, tableName(int(step.Table)), r.dropper(step, last))
	}
	var outs []string
	for _, p := range last.Parsed.OutputPorts {
		outs = append(outs, last.describePort(p))
	}
	verdict := "delivered on " + last.Node + " to " + strings.Join(outs, ", ")
	if allowed := r.policyAllowances(); len(allowed) > 0 {
		verdict += "; allowed by " + strings.Join(allowed, ", ")
	}
	return verdict
}

// dropper names the flow that dropped the packet: its owner, and for flows that are not
// NetworkPolicy's, which flow it was.
func (r *TraceResult) dropper(step ovs.TraceStep, h Hop) string {
	owner := r.owners.describe(pipeline.Cookie(step.Cookie), h.ports)
	switch {
	case pipeline.Cookie(step.Cookie).Category() == pipeline.CategoryPolicy,
		pipeline.Cookie(step.Cookie).ClusterKind() == pipeline.ClusterKindRule:
		return owner
	case step.Priority == 0:
		return owner + " table-miss flow (no flow of this table matches the packet)"
	}
	return fmt.Sprintf("%s flow %s, priority %d", owner, step.Match, step.Priority)
}

// policyAllowances names the NetworkPolicy and ClusterNetworkPolicy rules that let the
// packet through (a cluster rule's Accept, or its Pass to NetworkPolicy), with the node
// where each did.
func (r *TraceResult) policyAllowances() []string {
	var out []string
	for _, h := range r.Hops {
		for _, s := range h.Parsed.Steps {
			if c := pipeline.Cookie(s.Cookie); c.PolicyKind() == pipeline.PolicyKindRule || c.ClusterKind() == pipeline.ClusterKindRule {
				out = append(out, r.owners.describe(c, h.ports)+" on "+h.Node)
			}
		}
	}
	return out
}

func (h Hop) describePort(p int) string {
	if name, ok := h.ports[p]; ok {
		return name
	}
	return "port " + strconv.Itoa(p)
}

// Print tells the story: each table by name, what it did, and the verdict.
func (r *TraceResult) Print(w io.Writer) {
	brief := r.owners
	brief.isolation = nil // the verdict says which NetworkPolicies isolate the pod
	for i, h := range r.Hops {
		where := "source node"
		if i > 0 {
			where = "after the tunnel"
		}
		fmt.Fprintf(w, "%s br-int (%s): %s\n", h.Node, where, describePacket(h.Packet))
		for i, s := range h.Parsed.Steps {
			for _, c := range h.Parsed.Continuations {
				if c.Step == i {
					fmt.Fprintf(w, "      %-16s conntrack answered ct_state=%s; the packet goes on in table %d\n", "(recirculation)", c.CtState, s.Table)
				}
			}
			fmt.Fprintf(w, "  %3d %-16s %s\n", s.Table, tableName(int(s.Table)), stepSummary(s, brief, h))
		}
		if r.Request.Raw {
			fmt.Fprintf(w, "\n--- ovs-appctl ofproto/trace br-int '%s' --ct-next %s ---\n%s\n", h.Packet.TraceFlow(), r.Request.CtState, h.Raw)
		}
	}
	fmt.Fprintf(w, "verdict: %s\n", r.Verdict)
	if r.Note != "" {
		fmt.Fprintf(w, "note: %s\n", r.Note)
	}
}

// stepSummary is one line per table: the match, then what it did and who owns the flow.
func stepSummary(s ovs.TraceStep, owners cookieOwners, h Hop) string {
	short := make([]string, len(s.Actions))
	for i, a := range s.Actions {
		short[i] = shortAction(a)
	}
	acts := strings.Join(short, " ")
	if len(acts) > 110 {
		acts = acts[:107] + "..."
	}
	match := s.Match
	if match == "" {
		match = "(any)"
	}
	return fmt.Sprintf("%s => %s   [%s]", match, acts, owners.describe(pipeline.Cookie(s.Cookie), h.ports))
}

// shortAction writes set_field:V->F as F=V, so that a routing step's tunnel destination
// and output port fit on its line (--raw shows the actions as OVS wrote them).
func shortAction(a string) string {
	v, ok := strings.CutPrefix(a, "set_field:")
	if !ok {
		return a
	}
	i := strings.LastIndex(v, "->")
	if i < 0 {
		return a
	}
	return v[i+2:] + "=" + v[:i]
}
