package agent

import (
	"context"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovstest"
)

// With host OVS started by ovs-ctl, ovs-vswitchd's control socket is named after its pid;
// a restarted ovs-vswitchd listens on another path. The agent must find it again: once
// it kept the first path, and every purge after a policy change failed from then on.
func TestAgentFindsTheControlSocketOfARestartedVswitchd(t *testing.T) {
	rig := ovstest.StartDatabase(t)
	rig.Vsctl(t, "--no-wait", "init")
	rig.StartVswitchdAsOVSCtl(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := &Agent{cfg: Config{NodeName: "node-1", Bridge: "br-int", OVSDB: rig.Endpoint(), OVSRundir: rig.Dir,
		DatapathType: "netdev", LearnedFlowLimit: DefaultLearnedFlowLimit}}
	if err := a.connectOVS(ctx); err != nil {
		t.Fatal(err)
	}
	defer a.store.Close()
	defer a.of.Close()
	if err := a.of.Vswitchd().PurgeDatapathFlows(ctx); err != nil {
		t.Fatalf("purge through %s: %v", rig.VswitchdCtl, err)
	}

	first := rig.VswitchdCtl
	rig.StopVswitchd(t)
	rig.StartVswitchdAsOVSCtl(t)
	if rig.VswitchdCtl == first {
		t.Fatalf("the restarted ovs-vswitchd listens on the same path %s; the test cannot tell", first)
	}
	// Its socket answers before it has read the database: revalidator/purge exists once
	// it has set up br-int's datapath. ovs-vsctl, without --no-wait, waits for that.
	rig.Vsctl(t, "--may-exist", "add-br", "br-int")
	if err := a.of.Vswitchd().PurgeDatapathFlows(ctx); err != nil {
		t.Errorf("purge after ovs-vswitchd restarted (now at %s): %v", rig.VswitchdCtl, err)
	}
}
