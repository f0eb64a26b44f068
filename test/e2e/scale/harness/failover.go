package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
)

// FailoverResult is the failover phase: the leading kovs-controller killed (SIGKILL) with
// every agent connected and nothing else changing, and the standby taking over.
type FailoverResult struct {
	// Killed and Leader are the replicas: the one killed and the one that took over.
	Killed, Leader string
	// ToLead is the kill to the standby's kovs_controller_leader reading 1 (polled every
	// 100 ms).
	ToLead time.Duration
	// Resync is, per agent, the kill to its latest snapshot (the new leader's, as the
	// agent's own timestamp); Resynced its largest.
	Resync   Durations
	Resynced time.Duration
	// Converged is the kill to the last agent message the converged state needed, once
	// every agent's share equals a from-scratch compile of the objects listed from
	// kube-apiserver; Verified counts those agents.
	Converged time.Duration
	Verified  int
}

// findLeader points the harness's reads of kovs-controller at the replica that leads,
// when the sandbox runs more than one.
func (h *Harness) findLeader(ctx context.Context) error {
	replicas := sandbox.ControllerReplicas(*h.state)
	if len(replicas) < 2 {
		return nil
	}
	return waitUntil(ctx, 2*time.Minute, 100*time.Millisecond, "one kovs-controller replica to lead", func() error {
		leader, _, err := h.leading(ctx, replicas)
		if err != nil {
			return err
		}
		h.controllerPort.Store(int64(leader.MetricsPort))
		return nil
	})
}

// leading returns the one replica that leads and another.
func (h *Harness) leading(ctx context.Context, replicas []sandbox.ControllerReplica) (leader, other sandbox.ControllerReplica, err error) {
	var leaders, others []sandbox.ControllerReplica
	for _, r := range replicas {
		l, err := h.replicaLeads(ctx, r)
		if err != nil {
			return leader, other, err
		}
		if l {
			leaders = append(leaders, r)
		} else {
			others = append(others, r)
		}
	}
	if len(leaders) != 1 || len(others) == 0 {
		return leader, other, fmt.Errorf("%d of %d kovs-controller replicas lead", len(leaders), len(replicas))
	}
	return leaders[0], others[0], nil
}

// replicaLeads reads kovs_controller_leader from the replica's /metrics.
func (h *Harness) replicaLeads(ctx context.Context, r sandbox.ControllerReplica) (bool, error) {
	body, err := h.getFrom(ctx, r.MetricsPort, "/metrics")
	if err != nil {
		return false, err
	}
	families, err := parseFamilies(body, r.Process)
	if err != nil {
		return false, err
	}
	f, ok := families["kovs_controller_leader"]
	if !ok || len(f.GetMetric()) == 0 {
		return false, fmt.Errorf("%s: no kovs_controller_leader in its /metrics", r.Process)
	}
	return f.GetMetric()[0].GetGauge().GetValue() == 1, nil
}

// failover kills the leading kovs-controller and times the standby's taking over: its
// lead, every agent's new snapshot, and every agent's share equal to a from-scratch
// compile again.
func (h *Harness) failover(ctx context.Context) error {
	if !h.cfg.Failover {
		return nil
	}
	replicas := sandbox.ControllerReplicas(*h.state)
	if len(replicas) < 2 {
		return fmt.Errorf("the failover phase needs a second kovs-controller replica (kovs-sandbox up --controller-replicas 2)")
	}
	leader, standby, err := h.leading(ctx, replicas)
	if err != nil {
		return err
	}
	fo := &h.result.Failover
	fo.Killed, fo.Leader = leader.Process, standby.Process
	agents := h.sortedAgents()
	before := make([]int64, len(agents))
	for i, a := range agents {
		before[i] = a.snapshots.Load()
	}
	h.procs.freeze(leader.Process)
	killed := time.Now()
	if err := h.layout.Kill(leader.Process); err != nil {
		return err
	}
	err = waitUntil(ctx, 5*time.Minute, 100*time.Millisecond, standby.Process+" to lead", func() error {
		l, err := h.replicaLeads(ctx, standby)
		if err == nil && !l {
			err = fmt.Errorf("%s does not lead yet", standby.Process)
		}
		return err
	})
	if err != nil {
		return err
	}
	fo.ToLead = time.Since(killed)
	h.controllerPort.Store(int64(standby.MetricsPort))
	h.logf("%s killed; %s led %s later", leader.Process, standby.Process, fo.ToLead.Round(time.Millisecond))
	err = waitUntil(ctx, h.cfg.ConvergenceTimeout, 100*time.Millisecond, "every agent's snapshot from the new leader", func() error {
		missing := 0
		for i, a := range agents {
			if a.snapshots.Load() == before[i] {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d agents have had no snapshot since the kill", missing, len(agents))
		}
		return nil
	})
	for i, a := range agents {
		if a.snapshots.Load() != before[i] {
			fo.Resync = append(fo.Resync, time.Unix(0, a.lastSnapshotAt.Load()).Sub(killed))
		}
	}
	fo.Resynced = fo.Resync.Max()
	if err != nil {
		return err
	}
	if err := h.waitConverged(ctx, func() (clusterObjects, error) { return h.fresh(ctx) }); err != nil {
		return err
	}
	last := killed
	for _, a := range agents {
		if t := time.Unix(0, a.lastApplied.Load()); t.After(last) {
			last = t
		}
	}
	fo.Converged, fo.Verified = last.Sub(killed), len(agents)
	return nil
}
