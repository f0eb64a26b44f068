package integration

import (
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/audit"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// TestMonitorPacketIns: a flow's controller action through a packet meter reaches the
// monitor as the audit log reads it: the flow's table and cookie, the userdata, and the
// packet's addresses and ports. (ovs-ofctl monitor prints on standard error: a monitor
// reading only standard output got nothing.)
func TestMonitorPacketIns(t *testing.T) {
	rig, of, ctx := bridgeWithFlows(t)
	if err := of.SetMeter(ctx, ovs.Meter{ID: pipeline.AuditMeterID, RateKbps: 100, BurstKbits: 100, Packets: true}); err != nil {
		t.Fatal(err)
	}
	flow := "cookie=0x1050100000007, table=70, priority=100,tcp actions=controller(userdata=02,meter_id=1048576)"
	if err := of.Bundle(ctx, []ovs.Mod{ovs.AddFlow(flow)}); err != nil {
		t.Fatal(err)
	}
	got := make(chan audit.PacketIn, 16)
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- of.MonitorPacketIns(mctx, func(r io.Reader) error {
			return audit.ScanPacketIns(r, func(p audit.PacketIn) { got <- p })
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("monitor: %v", err)
		}
	}()
	// A TCP SYN 10.244.1.5:34567 -> 10.244.1.6:80, sent into table 70 until the monitor,
	// which connects on its own time, has received one.
	const pkt = "0a580af401030a580af4010408004500002800010000400600000af401050af40106870700500000000100000000500200ffff00000000"
	send := func() {
		out, err := exec.Command("ovs-ofctl", "-O", "OpenFlow15", "packet-out", "unix:"+filepath.Join(rig.Dir, "br-int.mgmt"),
			"in_port=LOCAL packet="+pkt+" actions=resubmit(,70)").CombinedOutput()
		if err != nil {
			t.Fatalf("packet-out: %v\n%s", err, out)
		}
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		send()
		select {
		case p := <-got:
			src, _ := p.Addr(true)
			dst, _ := p.Addr(false)
			if p.Table != 70 || p.Cookie != 0x1050100000007 || len(p.UserData) != 1 || audit.VerdictOfCode(p.UserData[0]) != audit.Deny ||
				src.String() != "10.244.1.5" || dst.String() != "10.244.1.6" || p.Port(true) != 34567 || p.Port(false) != 80 || p.Protocol() != "TCP" {
				t.Fatalf("packet-in %+v", p)
			}
			return
		case <-deadline:
			t.Fatal("no packet-in reached the monitor in 10s")
		case <-tick.C:
		}
	}
}
