package ovs

import (
	"strconv"
	"strings"
)

// Learn is a learn action: from the packet being processed, it adds (or refreshes) a flow
// in Table. It renders as ovs-ofctl dump-flows prints it: the learned flow's table, idle
// timeout, priority and cookie (none when 0), the eth_type and IP protocol it matches,
// then Specs, its other match fields and its actions in learn's own syntax (e.g.
// "NXM_OF_IP_SRC[]=NXM_OF_IP_DST[]", "load:0x1->NXM_NX_REG0[8..9]").
type Learn struct {
	Table       uint8
	IdleTimeout uint16
	Priority    uint16
	Cookie      uint64
	EthType     uint16
	IPProto     uint8
	Specs       []string
}

func (l Learn) String() string {
	parts := make([]string, 0, 6+len(l.Specs))
	parts = append(parts, "table="+strconv.Itoa(int(l.Table)), "idle_timeout="+strconv.Itoa(int(l.IdleTimeout)),
		"priority="+strconv.Itoa(int(l.Priority)))
	if l.Cookie != 0 {
		parts = append(parts, "cookie=0x"+strconv.FormatUint(l.Cookie, 16))
	}
	parts = append(parts, "eth_type=0x"+strconv.FormatUint(uint64(l.EthType), 16), "nw_proto="+strconv.Itoa(int(l.IPProto)))
	return "learn(" + strings.Join(append(parts, l.Specs...), ",") + ")"
}
