package kovsctl

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// TraceRequest is what `kovsctl trace` was asked.
type TraceRequest struct {
	Src, Dst string
	Proto    string
	Port     int
	Raw      bool
}

// Hop is the trace on one node.
type Hop struct {
	Node   string
	Packet packet
	Raw    string
	Parsed ParsedTrace
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
	}
	hop, err := a.traceOn(ctx, src.Node, pkt)
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
		second := a.afterTunnel(pkt, nodes[src.Node], next)
		hop2, err := a.traceOn(ctx, next.Name, second)
		if err != nil {
			return nil, err
		}
		res.Hops = append(res.Hops, hop2)
	}
	res.Verdict = res.verdict()
	return res, nil
}

// firstPacket is the packet as the source pod sends it: to its gateway's MAC.
func (a Access) firstPacket(ctx context.Context, src, dst *endpoint, nodes map[string]nodeInfo, req TraceRequest) (packet, error) {
	if len(dst.IPs) == 0 {
		return packet{}, fmt.Errorf("destination %s has no address yet", dst.Name)
	}
	var srcIP, dstIP netip.Addr
	for _, d := range dst.IPs {
		if s, ok := sameFamily(src.IPs, d); ok {
			srcIP, dstIP = s, d
			break
		}
	}
	if !srcIP.IsValid() {
		return packet{}, fmt.Errorf("%s (%v) and %s (%v) share no address family", src.Name, src.IPs, dst.Name, dst.IPs)
	}
	ofport, err := a.podOFPort(ctx, src)
	if err != nil {
		return packet{}, err
	}
	gw := nodes[src.Node].GatewayMAC
	if gw == nil {
		return packet{}, fmt.Errorf("node %s has no kovs subnets yet", src.Node)
	}
	return packet{InPort: ofport, SrcMAC: src.MAC, DstMAC: gw, Src: srcIP, Dst: dstIP, TTL: 64,
		Proto: req.Proto, SrcPort: 40000, DstPort: req.Port}, nil
}

// afterTunnel is the packet as the destination node receives it: routed once (TTL and MACs
// rewritten by the source node), inside Geneve from the source node's endpoint.
func (a Access) afterTunnel(p packet, from, to nodeInfo) packet {
	next := p
	next.InPort = tunnelOFPort
	next.SrcMAC, next.DstMAC = from.GatewayMAC, to.GatewayMAC
	next.TTL = p.TTL - 1
	next.TunnelVNI = pipeline.TunnelVNI
	for _, u := range to.Underlay {
		if s, ok := sameFamily(from.Underlay, u); ok {
			next.TunnelSrc, next.TunnelDst = s, u
			break
		}
	}
	return next
}

// tunnelOFPort is the Geneve port's fixed OpenFlow number on br-int.
const tunnelOFPort = 1

func (a Access) traceOn(ctx context.Context, node string, p packet) (Hop, error) {
	o, err := a.connect(ctx, node)
	if err != nil {
		return Hop{}, err
	}
	defer o.Close()
	raw, err := o.of.Trace(ctx, p.Spec(), "--ct-next", "trk,new")
	if err != nil {
		return Hop{}, err
	}
	ports, err := portNames(ctx, o.db)
	if err != nil {
		return Hop{}, err
	}
	return Hop{Node: node, Packet: p, Raw: raw, Parsed: ParseTrace(raw), ports: ports}, nil
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
		return fmt.Sprintf("DROPPED on %s in table %d %s by %s", last.Node, step.Table, step.TableName(), r.owners.describe(step.Cookie, last.ports))
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

// policyAllowances names the NetworkPolicy rules that let the packet through, with the
// node where each did.
func (r *TraceResult) policyAllowances() []string {
	var out []string
	for _, h := range r.Hops {
		for _, s := range h.Parsed.Steps {
			if s.Cookie.PolicyKind() == pipeline.PolicyKindRule {
				out = append(out, r.owners.describe(s.Cookie, h.ports)+" on "+h.Node)
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
	for i, h := range r.Hops {
		where := "source node"
		if i > 0 {
			where = "after the tunnel"
		}
		fmt.Fprintf(w, "%s br-int (%s): %s\n", h.Node, where, h.Packet.Describe())
		for _, s := range h.Parsed.Steps {
			fmt.Fprintf(w, "  %3d %-16s %s\n", s.Table, s.TableName(), stepSummary(s, r.owners, h))
		}
		if r.Request.Raw {
			fmt.Fprintf(w, "\n--- ovs-appctl ofproto/trace br-int '%s' --ct-next trk,new ---\n%s\n", h.Packet.Spec(), h.Raw)
		}
	}
	fmt.Fprintf(w, "verdict: %s\n", r.Verdict)
	if r.Note != "" {
		fmt.Fprintf(w, "note: %s\n", r.Note)
	}
}

// stepSummary is one line per table: the match, then what it did and who owns the flow.
func stepSummary(s TraceStep, owners cookieOwners, h Hop) string {
	acts := strings.Join(s.Actions, " ")
	if len(acts) > 90 {
		acts = acts[:87] + "..."
	}
	match := s.Match
	if match == "" {
		match = "(any)"
	}
	return fmt.Sprintf("%s => %s   [%s]", match, acts, owners.describe(s.Cookie, h.ports))
}
