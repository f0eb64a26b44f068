package agent

import (
	"maps"
	"slices"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/nodestatus"
)

// nodeStatus gathers the status now.
func (a *Agent) nodeStatus(now time.Time) nodestatus.Status {
	checks := a.readinessChecks()
	st := nodestatus.Status{Node: a.cfg.NodeName, Time: now, Live: a.liveness(now) == nil, Ready: ready(checks) == nil,
		Checks: checks, Bridge: a.cfg.Bridge, Peers: []nodestatus.Peer{}}
	if state := a.health.state.Load(); state != nil {
		st.Round = uint64(state.round)
		st.Pods = len(state.Pods())
		st.Flows.DesiredGeneration = state.generationNow()
		for _, p := range state.Peers() {
			ps := nodestatus.Peer{Node: p.NodeName, TunnelIP: p.UnderlayIP.String()}
			for _, s := range p.PodSubnets {
				ps.Subnets = append(ps.Subnets, s.String())
			}
			st.Peers = append(st.Peers, ps)
		}
		rejected := state.RejectedPeers()
		for _, name := range slices.Sorted(maps.Keys(rejected)) {
			st.RejectedPeers = append(st.RejectedPeers, nodestatus.RejectedPeer{Node: name, Reason: rejected[name]})
		}
	}
	if syncer := a.health.syncer.Load(); syncer != nil {
		st.Flows.ByTable = syncer.installedPerTable()
		for _, n := range st.Flows.ByTable {
			st.Flows.Installed += n
		}
		gen, err := syncer.Synced()
		st.Flows.InstalledGeneration = gen
		if err != nil {
			st.Flows.LastError = err.Error()
		}
		h := syncer.syncHealth()
		st.Flows.LastSync, st.Flows.LastFullSync = h.succeeded, h.fullSynced
	}
	if a.cfg.PolicyFeed != nil {
		st.Policy = a.policyStatus()
	}
	return st
}

func (a *Agent) policyStatus() *nodestatus.Policy {
	ps := &nodestatus.Policy{}
	p := a.health.policy.Load()
	if p == nil {
		return ps
	}
	ps.RealizedGeneration = p.Realized()
	p.mu.Lock()
	ps.Received, ps.ReceivedGeneration, ps.Rules = p.have, p.share.Generation, len(p.share.Rules)
	p.mu.Unlock()
	a.health.mu.Lock()
	connected := a.health.feedConnected
	a.health.mu.Unlock()
	if connected != nil {
		c := connected()
		ps.Connected = &c
	}
	return ps
}
