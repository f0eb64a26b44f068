package integration

import (
	"errors"
	"strings"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovstest"
)

func gatewaySpec() ovs.PortSpec {
	return ovs.PortSpec{
		Name: "kovs-gw0", Type: ovs.PortTypeInternal, OfportRequest: 2, MTURequest: 1450,
		MAC: "0a:58:0a:f4:01:01", ExternalIDs: map[string]string{"kovs.io/role": "gateway"},
	}
}

func tunnelSpec() ovs.PortSpec {
	return ovs.PortSpec{
		Name: "kovs-tun0", Type: ovs.PortTypeGeneve, OfportRequest: 1,
		Options: map[string]string{"remote_ip": "flow", "key": "flow"},
	}
}

func TestEnsurePortAssignsRequestedOfports(t *testing.T) {
	rig := ovstest.Start(t)
	ctx := testContext(t)
	db := connect(t, ctx, rig)
	if err := db.EnsureBridge(ctx, brIntSpec()); err != nil {
		t.Fatal(err)
	}
	for _, spec := range []ovs.PortSpec{gatewaySpec(), tunnelSpec()} {
		for i := range 2 {
			ofport, err := db.EnsurePort(ctx, "br-int", spec)
			if err != nil {
				t.Fatalf("EnsurePort %s #%d: %v", spec.Name, i+1, err)
			}
			if ofport != spec.OfportRequest {
				t.Errorf("EnsurePort %s #%d = ofport %d, want %d", spec.Name, i+1, ofport, spec.OfportRequest)
			}
		}
	}
	if got := rig.Vsctl(t, "get", "Interface", "kovs-tun0", "options"); got != `{key=flow, remote_ip=flow}` {
		t.Errorf("tunnel options = %s", got)
	}
	if got := rig.Vsctl(t, "get", "Interface", "kovs-gw0", "mac_in_use"); got != `"0a:58:0a:f4:01:01"` {
		t.Errorf("gateway mac_in_use = %s, want the requested MAC", got)
	}
	found, err := db.FindPorts(ctx, "br-int", "kovs.io/role", "gateway")
	if err != nil || len(found) != 1 || found[0].Name != "kovs-gw0" || found[0].Ofport != 2 || found[0].MAC != "0a:58:0a:f4:01:01" {
		t.Errorf("FindPorts(kovs.io/role=gateway) = %+v, %v; want kovs-gw0 at ofport 2", found, err)
	}
}

func TestEnsurePortWithoutRequestGetsAnOfport(t *testing.T) {
	rig := ovstest.Start(t)
	ctx := testContext(t)
	db := connect(t, ctx, rig)
	if err := db.EnsureBridge(ctx, brIntSpec()); err != nil {
		t.Fatal(err)
	}
	spec := ovs.PortSpec{Name: "int1", Type: ovs.PortTypeInternal,
		ExternalIDs: map[string]string{"iface-id": "default_web-0", "k8s.pod.uid": "u1"}}
	ofport, err := db.EnsurePort(ctx, "br-int", spec)
	if err != nil || ofport <= 0 || ofport == ovs.OfportLocal {
		t.Fatalf("EnsurePort = %d, %v; want a fresh ofport", ofport, err)
	}
	// Move it to a requested ofport, and change an external ID.
	spec.OfportRequest = 40
	spec.ExternalIDs = map[string]string{"iface-id": "default_web-0", "k8s.pod.uid": "u2"}
	if ofport, err = db.EnsurePort(ctx, "br-int", spec); err != nil || ofport != 40 {
		t.Fatalf("EnsurePort with ofport_request 40 = %d, %v", ofport, err)
	}
	if got := rig.Vsctl(t, "get", "Interface", "int1", "external_ids:k8s.pod.uid"); got != `u2` {
		t.Errorf("interface external_ids:k8s.pod.uid = %s, want u2", got)
	}
	if got := rig.Vsctl(t, "get", "Port", "int1", "external_ids:iface-id"); got != `default_web-0` {
		t.Errorf("port external_ids:iface-id = %s", got)
	}
	// Zero values clear the columns EnsurePort owns; the ofport stays.
	spec.OfportRequest, spec.ExternalIDs = 0, nil
	spec.MTURequest, spec.Options = 1400, map[string]string{"x": "y"}
	if _, err := db.EnsurePort(ctx, "br-int", spec); err != nil {
		t.Fatal(err)
	}
	spec.MTURequest, spec.Options = 0, nil
	if ofport, err = db.EnsurePort(ctx, "br-int", spec); err != nil || ofport != 40 {
		t.Fatalf("EnsurePort clearing the request = %d, %v; want ofport 40 kept", ofport, err)
	}
	for _, col := range []string{"ofport_request", "mtu_request", "options"} {
		if got := rig.Vsctl(t, "get", "Interface", "int1", col); got != "[]" && got != "{}" {
			t.Errorf("interface %s = %s, want it cleared", col, got)
		}
	}
}

func TestEnsurePortReportsInterfaceError(t *testing.T) {
	rig := ovstest.Start(t)
	ctx := testContext(t)
	db := connect(t, ctx, rig)
	if err := db.EnsureBridge(ctx, brIntSpec()); err != nil {
		t.Fatal(err)
	}
	_, err := db.EnsurePort(ctx, "br-int", ovs.PortSpec{Name: "no-such-veth"})
	if err == nil || !strings.Contains(err.Error(), "no-such-veth") || !strings.Contains(err.Error(), "could not") {
		t.Fatalf("EnsurePort of a missing device = %v, want the interface error", err)
	}
	t.Logf("error: %v", err)
}

func TestEnsurePortOnMissingBridge(t *testing.T) {
	rig := ovstest.Start(t)
	ctx := testContext(t)
	db := connect(t, ctx, rig)
	_, err := db.EnsurePort(ctx, "br-nope", gatewaySpec())
	if !errors.Is(err, ovs.ErrNotFound) {
		t.Fatalf("EnsurePort on a missing bridge = %v, want ErrNotFound", err)
	}
}

func TestDeletePort(t *testing.T) {
	rig := ovstest.Start(t)
	ctx := testContext(t)
	db := connect(t, ctx, rig)
	if err := db.EnsureBridge(ctx, brIntSpec()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.EnsurePort(ctx, "br-int", gatewaySpec()); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := db.DeletePort(ctx, "br-int", "kovs-gw0"); err != nil {
			t.Fatalf("DeletePort #%d: %v", i+1, err)
		}
	}
	if err := db.DeletePort(ctx, "br-nope", "kovs-gw0"); err != nil {
		t.Fatalf("DeletePort on a missing bridge: %v", err)
	}
	if got := rig.Vsctl(t, "list-ports", "br-int"); got != "" {
		t.Errorf("ports after delete = %q", got)
	}
	if got := rig.Vsctl(t, "--columns=name", "find", "Interface", "name=kovs-gw0"); got != "" {
		t.Errorf("interface left behind: %q", got)
	}
}
