package integration

import (
	"context"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovstest"
)

// Deleting a datapath flow that is already gone (expired, or deleted by a revalidator
// since the dump) is no error; with ovs-vswitchd unreachable it is one, which the agent
// must see: a policy change whose stale flows were not deleted is not in force.
func TestDeleteDatapathFlowGoneAndUnreachable(t *testing.T) {
	rig := ovstest.Start(t)
	rig.Vsctl(t, "add-br", "br-int", "--", "set", "bridge", "br-int", "datapath_type=netdev", "fail_mode=secure")
	v := ovs.NewVswitchd(ovs.VswitchdConfig{Ctl: rig.VswitchdCtl, RunDir: rig.Dir})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := v.DumpDatapathFlows(ctx); err != nil {
		t.Fatal(err)
	}
	const gone = "ufid:0e38c54c-f813-4153-8a83-76867c6bfbcd"
	if err := v.DeleteDatapathFlow(ctx, gone); err != nil {
		t.Errorf("a flow the datapath does not hold: %v, want no error", err)
	}
	rig.StopVswitchd(t)
	if err := v.DeleteDatapathFlow(ctx, gone); err == nil {
		t.Error("ovs-vswitchd stopped: no error")
	}
	if _, err := v.DumpDatapathFlows(ctx); err == nil {
		t.Error("dump with ovs-vswitchd stopped: no error")
	}
}
