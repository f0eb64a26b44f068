package harness

import (
	"time"
)

// Result is what a run measured. A run that failed returns what it measured up to the
// failure, with Failure saying where.
type Result struct {
	Config Config
	// Failure is the phase that failed and its error; empty for a complete run.
	Failure string
	// NodeBlocks is registration to every node having its blocks; AgentsConnected from
	// the first token to every agent having its snapshot.
	NodeBlocks, AgentsConnected time.Duration
	// WorkloadStart, WorkloadWritten and FirstConvergence are when the workload's first
	// write was made, when its last returned, and when every agent first held exactly
	// its node's from-scratch share.
	WorkloadStart, WorkloadWritten, FirstConvergence time.Time
	// ConvergenceSeen is when the polling check saw it.
	ConvergenceSeen time.Time
	// WorkloadObjects counts the workload's objects created (namespaces, pods,
	// policies), for a run that failed before writing them all.
	WorkloadObjects                                 int64
	InitialAllocation, InitialAllocationAfterCreate Durations
	// InitialDelivery and InitialOnNode split InitialAllocation: the Create call to the
	// node's informer handing the pod over, and that to the address allocated (kovs).
	InitialDelivery, InitialOnNode Durations

	ProbeLatency Durations
	ProbeLost    int
	SpanSamples  []SpanSample
	// FanOut is the changes that reach every node.
	FanOut FanOutResult

	Churn ChurnResult
	// FinalConvergence is the wait, after the churn, for every agent's share to equal the
	// compile of the objects listed from kube-apiserver; Verified counts those agents.
	FinalConvergence time.Duration
	Verified         int
	// Steps are the churn at stepped rates, after the final check.
	Steps []ChurnStep
	// Failover is the leading kovs-controller killed and the standby taking over.
	Failover FailoverResult

	Phases    []PhaseUsage
	Processes []ProcessUsage
	Audit     AuditCounts
	// APIServer is kube-apiserver's own /metrics per phase: every client's requests.
	APIServer []APIServerPhase
}

// apiserverPhase returns what kube-apiserver counted in the named phase.
func (r *Result) apiserverPhase(name string) (APIServerPhase, bool) {
	for _, p := range r.APIServer {
		if p.Name == name {
			return p, true
		}
	}
	return APIServerPhase{}, false
}

// ChurnResult is the churn phase's measurements.
type ChurnResult struct {
	Duration                                        time.Duration
	PodsCreated, PodsDeleted, PolicyChanges, Failed int64
	// Allocation is pod creation (before its Create call) to its address allocated on
	// its node; AllocationAfterCreate from the Create call's answer to the allocation
	// (kovs's part, with the watch's delivery); AllocationPending the pods still without
	// one at the end, DeletedBeforeAllocation those the churn deleted before (no sample).
	Allocation, AllocationAfterCreate          Durations
	AllocationPending, DeletedBeforeAllocation int
	// Delivery and OnNode split Allocation: the Create call to the node's informer handing
	// the pod over (kube-apiserver and the harness: any node-local plugin's floor), and that
	// to the address allocated (kovs's allocator).
	Delivery, OnNode Durations
	// PolicyLatency is a policy change's write to the last concerned agent applying it;
	// PolicyLost the changes not realized within the deadline, PolicyNoNode those that
	// concerned no node, PolicySuperseded the creations deleted before they were realized.
	PolicyLatency                              Durations
	PolicyLost, PolicyNoNode, PolicySuperseded int
	PolicySplit                                PolicySplit
	// KovsClock splits the same changes at kovs-controller's own receipt of them.
	KovsClock KovsClock
	Traffic   []AgentTraffic
	// Reconciles is what kovs-controller's pod workers (bandwidth checks) did over the churn's
	// writes (its /metrics read before and after), to tell a wait for a worker from a
	// slow Reconcile.
	Reconciles ReconcileStats
	// ControllerSplit is kovs-controller's histograms of its policy path over the churn's
	// writes (its /metrics read before and after).
	ControllerSplit ControllerSplit
}

// AgentTraffic is one agent's traffic over a phase and the size of its share at the end.
type AgentTraffic struct {
	Node        string
	Traffic     Traffic
	WireBytes   int64
	Pods, Rules int
}

// completed reports whether the named phase ran to its end: it ran, and it is not the
// phase that failed (always the last one run).
func (r *Result) completed(name string) bool {
	for i, p := range r.Phases {
		if p.Name == name {
			return r.Failure == "" || i < len(r.Phases)-1
		}
	}
	return false
}

// phase returns the named phase's usage.
func (r *Result) phase(name string) (PhaseUsage, bool) {
	for _, p := range r.Phases {
		if p.Name == name {
			return p, true
		}
	}
	return PhaseUsage{}, false
}
