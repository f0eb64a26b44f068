package ovs

import (
	"net/netip"
	"strconv"
	"strings"
)

// CT is a ct action: the packet goes through conntrack in Zone. Commit records the
// connection; Table (when Recirculate) is where the pipeline resumes with ct_state filled
// in. NAT applies the connection's existing NAT; NATDst or NATSrc (with Commit) translate
// its destination (and port, when not 0) or source; MarkMask (with Commit) sets those
// ct_mark bits to Mark. It renders as ovs-ofctl dump-flows prints it.
type CT struct {
	Commit         bool
	Zone           uint16
	Recirculate    bool
	Table          uint8
	NAT            bool
	NATDst         netip.AddrPort
	NATSrc         netip.Addr
	Mark, MarkMask uint32
}

func (a CT) String() string {
	var args []string
	if a.Commit {
		args = append(args, "commit")
	}
	if a.Recirculate {
		args = append(args, "table="+strconv.Itoa(int(a.Table)))
	}
	args = append(args, "zone="+strconv.Itoa(int(a.Zone)))
	switch {
	case a.NATDst.IsValid():
		args = append(args, "nat(dst="+natTarget(a.NATDst)+")")
	case a.NATSrc.IsValid():
		args = append(args, "nat(src="+a.NATSrc.String()+")")
	case a.NAT:
		args = append(args, "nat")
	}
	if a.MarkMask != 0 {
		args = append(args, "exec(set_field:0x"+strconv.FormatUint(uint64(a.Mark), 16)+
			"/0x"+strconv.FormatUint(uint64(a.MarkMask), 16)+"->ct_mark)")
	}
	return "ct(" + strings.Join(args, ",") + ")"
}

// natTarget renders a NAT address as ovs-ofctl prints it: 10.0.0.1:80, [fd00::1]:80, or
// the address alone when the port is 0.
func natTarget(ap netip.AddrPort) string {
	if ap.Port() == 0 {
		return ap.Addr().String()
	}
	if ap.Addr().Is6() {
		return "[" + ap.Addr().String() + "]:" + strconv.Itoa(int(ap.Port()))
	}
	return ap.Addr().String() + ":" + strconv.Itoa(int(ap.Port()))
}
