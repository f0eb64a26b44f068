package ovsfake

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

func fakeWithBridge(t *testing.T) *OVSDB {
	t.Helper()
	f := NewOVSDB()
	err := f.EnsureBridge(context.Background(), ovs.BridgeSpec{Name: "br-int", DatapathType: ovs.DatapathNetdev,
		FailMode: ovs.FailModeSecure, OtherConfig: map[string]string{"datapath-id": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFakeOVSDBBridgeMergesMaps(t *testing.T) {
	f := fakeWithBridge(t)
	ctx := context.Background()
	if err := f.EnsureBridge(ctx, ovs.BridgeSpec{Name: "br-int", DatapathType: ovs.DatapathNetdev,
		OtherConfig: map[string]string{"hwaddr": "02:00:00:00:00:01"}}); err != nil {
		t.Fatal(err)
	}
	b, _ := f.Bridge("br-int")
	if b.OtherConfig["datapath-id"] != "1" || b.OtherConfig["hwaddr"] == "" || b.FailMode != "" {
		t.Errorf("bridge = %+v, want merged other_config and the new fail mode", b)
	}
	ports, err := f.Ports(ctx, "br-int")
	if err != nil || len(ports) != 1 || ports[0].Ofport != ovs.OfportLocal {
		t.Errorf("ports = %+v, %v; want the local port", ports, err)
	}
}

func TestFakeOVSDBOfports(t *testing.T) {
	f := fakeWithBridge(t)
	ctx := context.Background()
	ensure := func(spec ovs.PortSpec) int {
		t.Helper()
		ofport, err := f.EnsurePort(ctx, "br-int", spec)
		if err != nil {
			t.Fatalf("EnsurePort(%s): %v", spec.Name, err)
		}
		return ofport
	}
	if got := ensure(ovs.PortSpec{Name: "tun0", Type: ovs.PortTypeGeneve, OfportRequest: 1}); got != 1 {
		t.Errorf("tun0 at %d, want 1", got)
	}
	if got := ensure(ovs.PortSpec{Name: "pod-a"}); got != 2 {
		t.Errorf("pod-a at %d, want the lowest free ofport 2", got)
	}
	if got := ensure(ovs.PortSpec{Name: "pod-a", ExternalIDs: map[string]string{"iface-id": "ns_a"}}); got != 2 {
		t.Errorf("pod-a moved to %d on update", got)
	}
	if _, err := f.EnsurePort(ctx, "br-int", ovs.PortSpec{Name: "pod-b", OfportRequest: 1}); err == nil {
		t.Error("EnsurePort took an ofport another port holds")
	}
	found, err := f.FindPorts(ctx, "br-int", "iface-id", "ns_a")
	if err != nil || len(found) != 1 || found[0].Name != "pod-a" {
		t.Errorf("FindPorts = %+v, %v", found, err)
	}
	if _, err := f.EnsurePort(ctx, "br-nope", ovs.PortSpec{Name: "x"}); !errors.Is(err, ovs.ErrNotFound) {
		t.Errorf("EnsurePort on a missing bridge = %v", err)
	}
}

func TestFakeOVSDBFailedPortAndDelete(t *testing.T) {
	f := fakeWithBridge(t)
	ctx := context.Background()
	f.FailPort("veth1", "could not open network device veth1 (No such device)")
	_, err := f.EnsurePort(ctx, "br-int", ovs.PortSpec{Name: "veth1"})
	if err == nil || !strings.Contains(err.Error(), "No such device") {
		t.Fatalf("EnsurePort of a failing port = %v", err)
	}
	ports, _ := f.Ports(ctx, "br-int")
	if len(ports) != 2 || ports[1].Ofport != -1 || ports[1].Error == "" {
		t.Errorf("ports = %+v, want veth1 recorded with ofport -1 and its error", ports)
	}
	for range 2 {
		if err := f.DeletePort(ctx, "br-int", "veth1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.DeletePort(ctx, "br-int", "br-int"); err == nil {
		t.Error("DeletePort removed the bridge's own port")
	}
	if _, ok := f.Port("br-int", "veth1"); ok {
		t.Error("veth1 still there")
	}
}

func TestFakeOVSDBSwitchConfigAndClose(t *testing.T) {
	f := NewOVSDB()
	ctx := context.Background()
	if err := f.SetOtherConfig(ctx, map[string]string{"flow-restore-wait": "true", "vlan-limit": "0"}); err != nil {
		t.Fatal(err)
	}
	if err := f.RemoveOtherConfig(ctx, "flow-restore-wait"); err != nil {
		t.Fatal(err)
	}
	cfg, _ := f.OtherConfig(ctx)
	if len(cfg) != 1 || cfg["vlan-limit"] != "0" {
		t.Errorf("other_config = %v", cfg)
	}
	f.SetDatapathTypes(ovs.DatapathNetdev)
	if types, _ := f.DatapathTypes(ctx); len(types) != 1 {
		t.Errorf("datapath types = %v", types)
	}
	f.Close()
	if _, err := f.Ports(ctx, "br-int"); err == nil {
		t.Error("Ports after Close succeeded")
	}
}
