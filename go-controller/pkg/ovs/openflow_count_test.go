package ovs

import (
	"context"
	"strings"
	"testing"
)

func TestCountFlowsReadsTheAggregate(t *testing.T) {
	fx := newFakeExec().on("dump-aggregate", fakeAnswer{stdout: "OFPST_AGGREGATE reply (OF1.5) (xid=0x2): packet_count=12 byte_count=1176 flow_count=11208\n"})
	n, err := newTestOpenFlow(t, fx).CountFlows(context.Background(), 0x1000000000000, 0xffff800000000000)
	if err != nil || n != 11208 {
		t.Fatalf("CountFlows = %d, %v; want 11208", n, err)
	}
	if args := strings.Join(fx.ran("dump-aggregate")[0].Args, " "); !strings.Contains(args, "cookie=0x1000000000000/0xffff800000000000") {
		t.Errorf("dump-aggregate does not filter by cookie: %s", args)
	}
}

func TestCountFlowsRefusesOtherReplies(t *testing.T) {
	for _, out := range []string{"", "OFPST_AGGREGATE reply: packet_count=0 byte_count=0", "flow_count=-1", "flow_count=many"} {
		fx := newFakeExec().on("dump-aggregate", fakeAnswer{stdout: out})
		if n, err := newTestOpenFlow(t, fx).CountFlows(context.Background(), 0, 0); err == nil {
			t.Errorf("CountFlows of %q = %d, want an error", out, n)
		}
	}
	fx := newFakeExec().fail("dump-aggregate", "ovs-ofctl: br-int is not a bridge or a socket")
	if _, err := newTestOpenFlow(t, fx).CountFlows(context.Background(), 0, 0); err == nil || !strings.Contains(err.Error(), "not a bridge") {
		t.Errorf("CountFlows = %v, want ovs-ofctl's stderr", err)
	}
}
