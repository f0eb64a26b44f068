package agent

import "time"

// NodeStatus is the agent's own account of its node, served as JSON on /status for
// `kovsctl status`.
type NodeStatus struct {
	Node   string    `json:"node"`
	Time   time.Time `json:"time"`
	Live   bool      `json:"live"`
	Ready  bool      `json:"ready"`
	Checks []Check   `json:"checks"`
	// Bridge is the bridge the agent owns; Round its cookie round (this incarnation).
	Bridge string       `json:"bridge"`
	Round  uint64       `json:"round,omitempty"`
	Flows  FlowStatus   `json:"flows"`
	Pods   int          `json:"pods"`
	Peers  []PeerStatus `json:"peers"`
	// Policy is nil when NetworkPolicy is not enforced on the node.
	Policy *PolicyStatus `json:"policy,omitempty"`
}

// FlowStatus is the state of br-int's flows as the agent installed them.
type FlowStatus struct {
	// Installed counts the flows the agent installed; ByTable by table name.
	Installed int            `json:"installed"`
	ByTable   map[string]int `json:"byTable,omitempty"`
	// DesiredGeneration is the node state's generation; InstalledGeneration the one
	// whose flows are on the switch. They differ while a sync is due or failing.
	DesiredGeneration   uint64    `json:"desiredGeneration"`
	InstalledGeneration uint64    `json:"installedGeneration"`
	LastSync            time.Time `json:"lastSync,omitzero"`
	LastFullSync        time.Time `json:"lastFullSync,omitzero"`
	LastError           string    `json:"lastError,omitempty"`
}

// PeerStatus is one tunnel peer.
type PeerStatus struct {
	Node     string   `json:"node"`
	TunnelIP string   `json:"tunnelIP"`
	Subnets  []string `json:"subnets"`
}

// PolicyStatus is the node's NetworkPolicy share: the newest generation received from
// kovs-controller and the newest whose flows are installed.
type PolicyStatus struct {
	Received           bool   `json:"received"`
	Connected          *bool  `json:"connected,omitempty"`
	ReceivedGeneration uint64 `json:"receivedGeneration"`
	RealizedGeneration uint64 `json:"realizedGeneration"`
	Rules              int    `json:"rules"`
}

// nodeStatus gathers the status now.
func (a *Agent) nodeStatus(now time.Time) NodeStatus {
	checks := a.readinessChecks()
	st := NodeStatus{Node: a.cfg.NodeName, Time: now, Live: a.liveness(now) == nil, Ready: ready(checks) == nil,
		Checks: checks, Bridge: a.cfg.Bridge, Peers: []PeerStatus{}}
	if state := a.health.state.Load(); state != nil {
		st.Round = uint64(state.round)
		st.Pods = len(state.Pods())
		st.Flows.DesiredGeneration = state.generationNow()
		for _, p := range state.Peers() {
			ps := PeerStatus{Node: p.NodeName, TunnelIP: p.UnderlayIP.String()}
			for _, s := range p.PodSubnets {
				ps.Subnets = append(ps.Subnets, s.String())
			}
			st.Peers = append(st.Peers, ps)
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

func (a *Agent) policyStatus() *PolicyStatus {
	ps := &PolicyStatus{}
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
