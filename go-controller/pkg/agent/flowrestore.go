package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	log "github.com/sirupsen/logrus"
)

// FlowRestoreWait is the Open_vSwitch other_config key with which whoever starts
// ovs-vswitchd (kovs-ovs; an init system's OVS) asks it, as ovs-ctl's restart does, to
// keep the datapath flows it finds and to handle no packet until its OpenFlow tables are
// back: a restarted ovs-vswitchd otherwise meets traffic with an empty table (br-int is
// fail_mode=secure: it drops everything). ovs-vswitchd reads its tables from nowhere; the
// agent restores them (ports from OVSDB, meters, groups and flows) and then clears the key.
const FlowRestoreWait = "flow-restore-wait"

// endFlowRestoreWait is an OnSynced hook: once ovs-vswitchd holds every flow of the
// sync just done (and so the groups and meters those flows use, which it refuses flows
// without), it clears flow-restore-wait, and ovs-vswitchd starts forwarding with them.
// Until then it leaves the key set, whatever sync comes first after a restart.
func (a *Agent) endFlowRestoreWait(uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := endFlowRestoreWait(ctx, a.store, a.syncer); err != nil {
		log.WithError(err).Warn("ovs-vswitchd still waits for its flows (" + FlowRestoreWait + "); cleared after a later sync")
	}
}

// restoreWaitSwitch is the part of OVSDB endFlowRestoreWait reads and writes.
type restoreWaitSwitch interface {
	OtherConfig(ctx context.Context) (map[string]string, error)
	RemoveOtherConfig(ctx context.Context, keys ...string) error
}

// errFlowsMissing says the switch does not hold every flow the syncer installed.
var errFlowsMissing = errors.New("the switch does not hold every flow installed")

func endFlowRestoreWait(ctx context.Context, store restoreWaitSwitch, syncer *FlowSyncer) error {
	cfg, err := store.OtherConfig(ctx)
	if err != nil || cfg[FlowRestoreWait] != "true" {
		// Unreadable (OVSDB away): the next sync reads it again; the agent's OVSDB
		// health check reports the connection.
		return nil
	}
	if err := syncer.holdsInstalled(ctx); err != nil {
		if errors.Is(err, errFlowsMissing) {
			syncer.TriggerFull()
		}
		return err
	}
	if err := store.RemoveOtherConfig(ctx, FlowRestoreWait); err != nil {
		return fmt.Errorf("clear %s: %w", FlowRestoreWait, err)
	}
	log.Info("ovs-vswitchd's flows, groups and meters restored: " + FlowRestoreWait + " cleared, it forwards again")
	return nil
}

// holdsInstalled returns nil when the switch holds as many flows of the installed round
// as the syncer installed (counted by the switch), errFlowsMissing when it holds fewer.
func (s *FlowSyncer) holdsInstalled(ctx context.Context) error {
	s.mu.Lock()
	installed := s.installed
	s.mu.Unlock()
	filter, ok := installedRound(installed)
	if !ok {
		return fmt.Errorf("%w: no flows of one round installed yet", errFlowsMissing)
	}
	n, err := s.sw.CountFlows(ctx, filter)
	if err != nil {
		return fmt.Errorf("count the switch's flows: %w", err)
	}
	if n != len(installed) {
		return fmt.Errorf("%w: it holds %d of the %d", errFlowsMissing, n, len(installed))
	}
	return nil
}
