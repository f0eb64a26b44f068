package agent

import (
	"context"
	"path/filepath"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

// watchVswitchd repairs a restarted ovs-vswitchd as soon as br-int is back, instead of at
// the next periodic resync: the flows, groups and tunnel neighbours lived in the old
// process's memory. It watches an idle OpenFlow connection to br-int's management socket.
func (a *Agent) watchVswitchd(ctx context.Context, pods *PodPorts) {
	socket := filepath.Join(a.cfg.OVSRundir, a.cfg.Bridge+".mgmt")
	ovs.WatchBridge(ctx, socket, func() {
		a.forgetVswitchdVersion()
		// A new ovs-vswitchd has no meters, and refuses flows that use a missing one:
		// the pods' meters come back before their flows.
		if err := pods.syncBandwidth(ctx); err != nil {
			log.WithError(err).Warn("pod bandwidth meters not all restored after an ovs-vswitchd restart")
		}
		a.syncer.TriggerFull()
		a.neighbors.Run()
	})
}
