package responder

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestProbeDatagramRejectsBadInput(t *testing.T) {
	udp := Target{Addr: netip.MustParseAddr("127.0.0.1"), Port: Port{Number: 9, Protocol: UDP}}
	tcp := Target{Addr: udp.Addr, Port: Port{Number: 9, Protocol: TCP}}
	for _, tc := range []struct {
		target Target
		size   int
		want   string
	}{
		{tcp, 2000, "want a UDP target"},
		{udp, 3, "size 3 is not between"},
		{udp, 70000, "size 70000 is not between"},
	} {
		r := ProbeDatagram(context.Background(), tc.target, tc.size, time.Second)
		if !strings.Contains(r.Error, tc.want) {
			t.Errorf("ProbeDatagram(%s, %d): error %q, want it to say %q", tc.target, tc.size, r.Error, tc.want)
		}
	}
}
