package agent

import (
	"context"
	"path/filepath"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

// watchVswitchd repairs a restarted ovs-vswitchd as soon as br-int is back, instead of at
// the next periodic resync: the flows, groups and tunnel neighbours lived in the old
// process's memory. It watches an idle OpenFlow connection to br-int's management socket.
func (a *Agent) watchVswitchd(ctx context.Context) {
	socket := filepath.Join(a.cfg.OVSRundir, a.cfg.Bridge+".mgmt")
	ovs.WatchBridge(ctx, socket, func() {
		a.syncer.TriggerFull()
		a.neighbors.Run()
	})
}
