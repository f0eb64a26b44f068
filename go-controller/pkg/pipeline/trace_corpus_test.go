package pipeline

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// traceCorpusEnv names the directory where the randomized tests record every packet they
// trace, with the flows it went through and the Go tracer's verdict. pkg/ovs/integration
// (TestTracerAgreesWithOVS) runs those tests with it set, loads each flow set into a real
// ovs-vswitchd and checks that ofproto/trace reaches the same verdict for every packet.
const traceCorpusEnv = "KOVS_TRACE_CORPUS"

// TracedPacket is one line of the corpus's packets.jsonl.
type TracedPacket struct {
	Flows   string   `json:"flows"`   // the flow file, in the corpus directory (ovs-ofctl add-flows syntax)
	Packet  string   `json:"packet"`  // the packet, as an ofproto/trace flow
	CTNext  string   `json:"ctNext"`  // the ct_state every conntrack lookup returns (ofproto/trace --ct-next)
	Dropped bool     `json:"dropped"` // the Go tracer's verdict: dropped,
	Table   uint8    `json:"table"`   // in or after this table (the last one visited),
	Outputs []uint32 `json:"outputs"` // or sent out of these ports, in order
	What    string   `json:"what"`    // what the test traced it for
}

// traceCorpus records traces; nil (the environment variable unset) records nothing.
type traceCorpus struct {
	dir     string
	mu      sync.Mutex
	flows   map[*Tracer]string
	packets *os.File
	enc     *json.Encoder
}

// openTraceCorpus opens the corpus the environment names, for one test.
func openTraceCorpus(t *testing.T) *traceCorpus {
	t.Helper()
	dir := os.Getenv(traceCorpusEnv)
	if dir == "" {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(dir, "packets.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("trace corpus: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("trace corpus: %v", err)
		}
	})
	return &traceCorpus{dir: dir, flows: map[*Tracer]string{}, packets: f, enc: json.NewEncoder(f)}
}

// record adds one trace of pkt through tr, whose result was r.
func (c *traceCorpus) record(t *testing.T, what string, tr *Tracer, pkt Packet, ct CTFlags, r Result) {
	t.Helper()
	if c == nil {
		return
	}
	spec, err := traceFlowSpec(pkt)
	if err != nil {
		t.Fatalf("trace corpus: %s: %v", what, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	name, ok := c.flows[tr]
	if !ok {
		name = fmt.Sprintf("%s-%d.flows", strings.ReplaceAll(t.Name(), "/", "_"), len(c.flows))
		if err := os.WriteFile(filepath.Join(c.dir, name), []byte(tracerFlowText(tr)), 0o644); err != nil {
			t.Fatalf("trace corpus: %v", err)
		}
		c.flows[tr] = name
	}
	line := TracedPacket{Flows: name, Packet: spec, CTNext: ctNextSpec(ct | CTTracked), Dropped: r.Dropped(), What: what}
	if len(r.Steps) > 0 {
		line.Table = r.Steps[len(r.Steps)-1].Table.ID
	}
	for _, o := range r.Outputs {
		line.Outputs = append(line.Outputs, o.Port)
	}
	if err := c.enc.Encode(line); err != nil {
		t.Fatalf("trace corpus: %v", err)
	}
}

// tracerFlowText is the tracer's flows, one per line, as ovs-ofctl add-flows reads them.
func tracerFlowText(tr *Tracer) string {
	var flows []Flow
	for _, table := range tr.tables {
		flows = append(flows, table...)
	}
	SortFlows(flows)
	var b strings.Builder
	for _, f := range flows {
		b.WriteString(f.String() + "\n")
	}
	return b.String()
}

// ctNextSpec is ct_state flags as ofproto/trace --ct-next takes them ("trk,new").
func ctNextSpec(ct CTFlags) string {
	var names []string
	for f := CTNew; f <= CTDNAT; f <<= 1 {
		if ct&f != 0 {
			names = append(names, f.name())
		}
	}
	return strings.Join(names, ",")
}

// traceFlowSpec writes a packet the randomized tests make (TCP, UDP or SCTP over IPv4 or
// IPv6, from a local port or the tunnel) as an ofproto/trace flow.
func traceFlowSpec(p Packet) (string, error) {
	proto := map[uint8]string{IPProtoTCP: "tcp", IPProtoUDP: "udp", IPProtoSCTP: "sctp"}[p.IPProto]
	if proto == "" || (p.EthType != EthTypeIPv4 && p.EthType != EthTypeIPv6) {
		return "", fmt.Errorf("packet %s: the corpus writes TCP, UDP and SCTP over IP only", p)
	}
	fields := []string{fmt.Sprintf("in_port=%d", p.InPort)}
	if p.TunID != 0 || p.TunSrc.IsValid() {
		fields = append(fields, fmt.Sprintf("tun_id=%#x", p.TunID))
		switch {
		case p.TunSrc.Is4():
			fields = append(fields, "tun_src="+p.TunSrc.String())
		case p.TunSrc.Is6():
			fields = append(fields, "tun_ipv6_src="+p.TunSrc.String())
		}
	}
	fields = append(fields, "dl_src="+p.EthSrc.String(), "dl_dst="+p.EthDst.String())
	if p.EthType == EthTypeIPv6 {
		fields = append(fields, proto+"6", "ipv6_src="+p.IPSrc.String(), "ipv6_dst="+p.IPDst.String())
	} else {
		fields = append(fields, proto, "nw_src="+p.IPSrc.String(), "nw_dst="+p.IPDst.String())
	}
	fields = append(fields, fmt.Sprintf("nw_ttl=%d", p.TTL), fmt.Sprintf("%s_src=%d", proto, p.SrcPort), fmt.Sprintf("%s_dst=%d", proto, p.DstPort))
	return strings.Join(fields, ","), nil
}
