package harness

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
)

// Markdown writes the run's report: the table docs/scale.md holds.
func (r *Result) Markdown(w io.Writer, title string) {
	c := r.Config
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("# %s", title)
	p("")
	p("Run of %s. Sizes: %d nodes, %d pods (%d per node), %d namespaces, %d NetworkPolicies; churn %s at %d pod creations and %d deletions and %d policy changes per second; %d isolated probe changes (x2: creation and deletion).",
		r.WorkloadStart.UTC().Format("2006-01-02 15:04 MST"), c.Nodes, c.Pods(), c.PodsPerNode, c.Namespaces, c.Namespaces*c.PoliciesPerNS,
		c.ChurnDuration, c.PodChurnPerSecond, c.PodChurnPerSecond, c.PolicyChurnPerSec, c.SpanProbes)
	p("")
	if r.Failure != "" {
		p("**This run did not complete**: %s. The rows below give what it measured up to then; those of the phases it did not complete say so.", r.Failure)
		p("")
	}
	r.summary(p)
	p("")
	r.simulatedSection(p)
	if r.completed("span probes") {
		p("")
		r.spanSection(p)
	}
	if r.Config.FanOutProbes > 0 && r.completed("fan-out") {
		p("")
		r.fanOutSection(p)
	}
	if len(r.Steps) > 0 {
		p("")
		r.stepsSection(p)
	}
	p("")
	r.churnTrafficSection(p)
	p("")
	r.cpuSection(p)
	p("")
	r.auditSection(p)
	p("")
	r.apiserverSection(p)
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func (r *Result) summary(p func(string, ...any)) {
	ch := r.Churn
	p("| measure | value |")
	p("|---|---|")
	row := func(phase, measure, format string, args ...any) {
		if r.completed(phase) {
			p("| "+measure+" | "+format+" |", args...)
		} else {
			p("| %s | not completed (phase %s) |", measure, phase)
		}
	}
	row("nodes", "nodes registered to every node's block allocated", "%s", secs(r.NodeBlocks))
	row("agents", "agents: tokens minted, connected, first snapshot on all", "%s", secs(r.AgentsConnected))
	objects := r.Config.Namespaces*(1+r.Config.PoliciesPerNS) + r.Config.Pods()
	if written := r.WorkloadWritten.Sub(r.WorkloadStart); r.completed("workload") {
		p("| workload written (namespaces, pods, policies) | %s (%.0f objects/s) |", secs(written), float64(objects)/written.Seconds())
	} else if _, ran := r.phase("workload"); ran {
		p("| workload written (namespaces, pods, policies) | not completed: %d of %d objects created |", r.WorkloadObjects, objects)
	} else {
		p("| workload written (namespaces, pods, policies) | not completed (phase workload) |")
	}
	row("first convergence", "**first convergence of all agents** (every share = from-scratch compile), from the first write",
		"**%s** (%s after the last write; the polling check saw it %s later)",
		secs(r.FirstConvergence.Sub(r.WorkloadStart)), secs(r.FirstConvergence.Sub(r.WorkloadWritten)), secs(r.ConvergenceSeen.Sub(r.FirstConvergence)))
	if _, ran := r.phase("workload"); ran {
		p("| pod creation to address allocated, initial load | %s |", r.InitialAllocation.Summary())
		p("| ... from the Create call's answer (kovs's part and the watch) | %s |", r.InitialAllocationAfterCreate.Summary())
		p("| ... the Create call to the node's watch handing the pod over (kube-apiserver and this harness: any node-local plugin's floor) | %s |", r.InitialDelivery.Summary())
		p("| ... **kovs's part**: the node handed the pod to its address allocated | %s |", r.InitialOnNode.SummaryFine())
		p("| ... creation to address against the floor | %s |", floorRatio(r.InitialAllocation, r.InitialDelivery))
	}
	row("churn", "**pod creation to address allocated, under churn**", "**%s**; %d still pending at the end, %d deleted before",
		ch.Allocation.Summary(), ch.AllocationPending, ch.DeletedBeforeAllocation)
	row("churn", "... from the Create call's answer (kovs's part and the watch)", "%s", ch.AllocationAfterCreate.Summary())
	row("churn", "... the Create call to the node's watch handing the pod over (kube-apiserver and this harness: any node-local plugin's floor)", "%s", ch.Delivery.Summary())
	row("churn", "... **kovs's part**: the node handed the pod to its address allocated", "%s", ch.OnNode.SummaryFine())
	row("churn", "... creation to address against the floor", "%s", floorRatio(ch.Allocation, ch.Delivery))
	if rc := ch.Reconciles; rc.Reconciles > 0 {
		p("| kovs-controller's pod workers (bandwidth checks), churn (its /metrics) | %d reconciles (%.1f/s), mean %s each, mean queue wait %s |",
			rc.Reconciles, float64(rc.Reconciles)/ch.Duration.Seconds(), rc.MeanReconcile().Round(time.Millisecond), rc.MeanWait().Round(time.Millisecond))
	}
	row("span probes", "policy change to realized on every concerned node, isolated probes", "%s; %d lost", r.ProbeLatency.Summary(), r.ProbeLost)
	if fo := r.FanOut; r.Config.FanOutProbes > 0 {
		row("fan-out", "**a policy over one pod on every node**, created or deleted, to realized on every node, isolated probes", "**%s**; %d lost", fo.Policy.Summary(), fo.PolicyLost)
		if len(fo.PolicyClock.Kovs) > 0 || fo.PolicyClock.NoReceipt > 0 {
			row("fan-out", "... **kovs's time**: kovs-controller's informer receiving the change to realized on every node", "**%s**; %d without a receipt", fo.PolicyClock.Kovs.Summary(), fo.PolicyClock.NoReceipt)
			writeSplit(row, "fan-out", fo.PolicyClock)
		}
		row("fan-out", fmt.Sprintf("**a pod's address into an address set all %d nodes hold** (a pod created while a policy's peers select it), from before its Create call to the last node", fo.Nodes),
			"**%s**; %d address changes lost (creations and deletions)", fo.Added.Summary(), fo.Lost)
		row("fan-out", "... from before the Create call to the harness's informer delivering the pod's address (kube-apiserver, the hollow kubelet's allocation and status write, the watch)", "%s", fo.Seen.Summary())
		row("fan-out", "... **kovs's time**: kovs-controller's informer receiving the pod version with the address to the last node", "**%s**; %d changes without a receipt", fo.AddedKovs.Summary(), fo.NoReceipt)
		row("fan-out", "**that pod deleted: its address out of every node's sets**, from before the Delete call", "**%s**", fo.Removed.Summary())
		row("fan-out", "... **kovs's time**: kovs-controller's first receipt of the pod after the Delete call to the last node", "**%s**", fo.RemovedKovs.Summary())
	}
	row("churn", "**policy change to realized on every concerned node, under churn**",
		"**%s**; %d not realized within %s, %d concerned no node, %d creations deleted before realized",
		ch.PolicyLatency.Summary(), ch.PolicyLost, r.Config.RealizationDeadline, ch.PolicyNoNode, ch.PolicySuperseded)
	if kc := ch.KovsClock; len(kc.Kovs) > 0 || kc.NoReceipt > 0 {
		p("| ... **kovs's time**: kovs-controller's informer receiving the change (its own timestamp, --debug-receipts) to realized on every concerned node | **%s**; %d without a receipt (ring overwrote %d), %d received after realized (not timed: a deletion looks realized on a node once the churn deleted the pods it selected there) |",
			kc.Kovs.Summary(), kc.NoReceipt, kc.Overwritten, kc.ReceivedAfterRealized)
		writeSplit(row, "churn", kc)
		p("| ... from before the write to kovs-controller's informer receiving it (kube-apiserver's answer and watch) | %s |", kc.ToReceipt.Summary())
	}
	if sp := ch.PolicySplit; len(sp.Answered) > 0 {
		p("| ... its write answered, from before the write | %s |", sp.Answered.Summary())
		p("| ... delivered by the harness's own watch of NetworkPolicies, from before the write | %s |", sp.Seen.Summary())
		p("| ... from that delivery to realized on every concerned node (kovs-controller and the stream) | %s; %d realized before the harness's watch delivered them |",
			sp.AfterSeen.Summary(), sp.RealizedUnseen)
	}
	if cs := ch.ControllerSplit; cs.BatchWait.Count > 0 {
		p("| ... inside kovs-controller (its /metrics from the churn's start to its last change realized, bucket estimates): the oldest change's wait for its compile batch, per batch | %s |", cs.BatchWait.Summary())
		p("| ... the compile batch, per batch | %s |", cs.Batch.Summary())
		p("| ... a node's new generation sent on its stream to the agent's report of it realized, per node generation | %s |", cs.SentToRealized.Summary())
		p("| ... relaxations held by the transition gate until the restrictions sent before them were realized, per batch of relaxations that waited (the longest wait in it) | %s |", cs.TransitionWait.Summary())
	}
	rate := func(n int64) float64 { return float64(n) / ch.Duration.Seconds() }
	row("churn", "churn achieved", "%.1f pod creations/s, %.1f deletions/s, %.1f policy changes/s (%d writes failed)",
		rate(ch.PodsCreated), rate(ch.PodsDeleted), rate(ch.PolicyChanges), ch.Failed)
	if ph, ok := r.apiserverPhase("churn"); ok && r.completed("churn") {
		p("| **kube-apiserver's writes under churn** (every client; its /metrics): the end-to-end times above hold while these meet the SLO | %s |", writeP99(ph.Metrics))
	}
	for _, u := range r.Processes {
		if u.Name == "kovs-controller" {
			p("| **kovs-controller CPU** (whole run) | **%.1f s** |", u.CPUSeconds)
			p("| **kovs-controller peak RSS** (VmHWM) | **%s** |", mib(u.PeakRSS))
		}
	}
	if ph, ok := r.phase("churn"); ok && r.completed("churn") && r.Audit.Total > 0 {
		p("| **kube-apiserver requests/s by kovs-controller**, churn (audit log) | **%.1f** |", float64(r.Audit.PerPhase["churn"])/ph.End.Sub(ph.Start).Seconds())
	}
	row("final convergence", "final check: agents whose share equals a from-scratch compile of the API's objects",
		"%d of %d (waited %s after the churn)", r.Verified, r.Config.Nodes, secs(r.FinalConvergence))
	if fo := r.Failover; r.Config.Failover {
		row("failover", "**controller failover** (the leader killed, every agent connected): the standby leading, from the kill", "**%s** (%s killed, %s took over; the scale mode's Lease is 60 s)", secs(fo.ToLead), fo.Killed, fo.Leader)
		row("failover", "... every agent's new snapshot, from the kill", "**%s**; per agent %s", secs(fo.Resynced), fo.Resync.Summary())
		row("failover", "... every agent's share equal to a from-scratch compile of the API's objects, from the kill", "**%s**: %d of %d agents", secs(fo.Converged), fo.Verified, r.Config.Nodes)
	}
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func (r *Result) spanSection(p func(string, ...any)) {
	p("## Traffic per agent per change against its span (isolated probes)")
	p("")
	p("Each probe creates or deletes one shape-(a) policy with nothing else changing; every agent is charged the delta messages and their encoded JSON bytes it received until the change was realized everywhere plus %s. Span: how many of the node's pods the policy selects.", settle)
	p("")
	p("| span (selected pods on the node) | agent-changes | messages per agent-change | bytes per agent-change | bytes per selected pod | max bytes |")
	p("|---|---|---|---|---|---|")
	for _, row := range SpanTable(r.SpanSamples) {
		p("| %d | %d | %.2f | %.0f | %.0f | %d |", row.Span, row.Samples, row.Messages, row.Bytes, row.BytesPerSpan, row.MaxBytes)
	}
	with, total := Unconcerned(r.SpanSamples)
	p("")
	p("Agents with no pod selected by the change: **%d of %d** agent-changes received something for it.", with, total)
}

func (r *Result) fanOutSection(p func(string, ...any)) {
	fo := r.FanOut
	p("## Changes that reach every node (fan-out)")
	p("")
	p("The shape-(a) workload's changes concern a few nodes each. This phase makes the changes that reach every node, one at a time with nothing else changing: a namespace `%s` with one pod on each of the %d nodes; %d policies over all of them, each created and deleted (every node concerned: a rule for its pod and the address set of its peers, all %d pods); then, with one such policy in force, %d pods of that namespace, each created and deleted (its address enters and leaves the peers' address set on every node). Traffic per agent per change, counted as for the isolated probes (until realized everywhere plus %s):",
		wideNamespace, r.Config.Nodes, r.Config.FanOutProbes, r.Config.Nodes, r.Config.FanOutProbes, settle)
	p("")
	p("| change | agent-changes | messages per agent-change | bytes per agent-change | max bytes |")
	p("|---|---|---|---|---|")
	for _, row := range SpanTable(fo.PolicyTraffic) {
		p("| a policy over one pod on every node (span %d) | %d | %.2f | %.0f | %d |", row.Span, row.Samples, row.Messages, row.Bytes, row.MaxBytes)
	}
	for _, row := range SpanTable(fo.AddressTraffic) {
		p("| an address into or out of the peers' set | %d | %.2f | %.0f | %d |", row.Samples, row.Messages, row.Bytes, row.MaxBytes)
	}
	if len(fo.PolicyTails) == 0 {
		return
	}
	p("")
	p("When the nodes applied each policy over every node, from before its write (a change late on every node is held before the stream; one late on a few nodes, on their streams):")
	p("")
	p("| change | nodes | p50 | p90 | p99 | second last | last (node) | agents with a new snapshot meanwhile |")
	p("|---|---|---|---|---|---|---|---|")
	for _, t := range fo.PolicyTails {
		what := "deleted"
		if t.Create {
			what = "created"
		}
		p("| %s | %d | %s | %s | %s | %s | %s (%s) | %d |", what, t.Nodes, t.P50.Round(time.Millisecond), t.P90.Round(time.Millisecond),
			t.P99.Round(time.Millisecond), t.Second.Round(time.Millisecond), t.Last.Round(time.Millisecond), t.LastNode, t.Reconnected)
	}
}

func (r *Result) stepsSection(p func(string, ...any)) {
	p("## Churn rate steps")
	p("")
	p("After the final check, the churn again at stepped rates (factors of the churn's %d pod creations and as many deletions and %d policy changes per second), %s each, in order, stopping after the first step in which kube-apiserver's writes had a p99 above their %s SLO (its own /metrics, every client): from there on the end-to-end times measure kube-apiserver more than kovs. Policy changes from before the write to the last concerned node, and kovs's time from kovs-controller's receipt; pods from before the Create call to the address allocated, and kovs's part from the node's hand-over.",
		r.Config.PodChurnPerSecond, r.Config.PolicyChurnPerSec, r.Config.StepDuration, writeSLO)
	p("")
	p("| step | asked per second (pods created and deleted, policy changes) | achieved per second | kube-apiserver's writes | policy change, end to end | **kovs's time** | lost | pod creation to address | **kovs's part** |")
	p("|---|---|---|---|---|---|---|---|---|")
	for _, s := range r.Steps {
		ch := s.Churn
		d := ch.Duration.Seconds()
		writes := s.APIServerErr
		if writes == "" {
			writes = writeP99(s.APIServer)
		}
		if d <= 0 {
			d = 1
		}
		p("| x%g | %d, %d | %.1f, %.1f, %.1f | %s | %s | %s | %d | %s | %s |", s.Factor, s.PodsPerSecond, s.PoliciesPerSecond,
			float64(ch.PodsCreated)/d, float64(ch.PodsDeleted)/d, float64(ch.PolicyChanges)/d, writes,
			ch.PolicyLatency.Summary(), ch.KovsClock.Kovs.Summary(), ch.PolicyLost, ch.Allocation.Summary(), ch.OnNode.SummaryFine())
	}
}

func (r *Result) churnTrafficSection(p func(string, ...any)) {
	t := r.Churn.Traffic
	if len(t) == 0 {
		return
	}
	d := r.Churn.Duration.Seconds()
	msgs := func(a AgentTraffic) float64 { return float64(a.Traffic.Messages) / d }
	bytes := func(a AgentTraffic) float64 { return float64(a.Traffic.Bytes) / d }
	wire := func(a AgentTraffic) float64 { return float64(a.WireBytes) / d }
	p("## Traffic per agent under churn")
	p("")
	p("Per agent over the churn phase (%s): delta messages, their JSON bytes, and the bytes read off its TLS connection (TLS, HTTP/2, keepalives, report answers). Share size at the end: pods %s, rules %s.",
		secs(r.Churn.Duration), dist(t, func(a AgentTraffic) float64 { return float64(a.Pods) }, "%.0f"),
		dist(t, func(a AgentTraffic) float64 { return float64(a.Rules) }, "%.0f"))
	p("")
	p("| per agent | p50 | p99 | max |")
	p("|---|---|---|---|")
	for _, row := range []struct {
		name string
		f    func(AgentTraffic) float64
	}{{"delta messages/s", msgs}, {"delta bytes/s", bytes}, {"wire bytes/s", wire}} {
		v := values(t, row.f)
		p("| %s | %.1f | %.1f | %.1f |", row.name, nearestRank(v, 50), nearestRank(v, 99), slices.Max(v))
	}
}

func values(t []AgentTraffic, f func(AgentTraffic) float64) []float64 {
	v := make([]float64, len(t))
	for i, a := range t {
		v[i] = f(a)
	}
	slices.Sort(v)
	return v
}

func dist(t []AgentTraffic, f func(AgentTraffic) float64, format string) string {
	v := values(t, f)
	return fmt.Sprintf("p50 "+format+", p99 "+format+", max "+format, nearestRank(v, 50), nearestRank(v, 99), slices.Max(v))
}

// simulatedSection lists the choices of the method: what of a real cluster the run
// simulates, and what it leaves out because it never reaches kovs.
func (r *Result) simulatedSection(p func(string, ...any)) {
	p("## What is simulated, and what is not")
	p("")
	p("The run simulates what reaches kovs and leaves out what only loads kube-apiserver for nodes that do not exist:")
	p("")
	if iv := r.Config.LeaseRenewInterval; iv > 0 {
		p("- **Node Leases renewed every %s** by every hollow kubelet (KOVS_SCALE_LEASE_RENEW; kubelet's own interval is 10 s), %.0f Lease updates/s; kovs-controller reads no node Lease.", iv, float64(r.Config.Nodes)/iv.Seconds())
	} else {
		p("- **No Lease renewals**: each hollow kubelet creates its node's Lease once, at registration, and never renews it (kubelet renews every 10 s; KOVS_SCALE_LEASE_RENEW=10s turns that back on). kovs-controller reads no node Lease, and nothing else here does: kube-controller-manager's node lifecycle controller does not run, so no node turns NotReady or is tainted.")
	}
	p("- **kube-controller-manager runs only %s**: the ServiceAccount admission plugin refuses a pod until its namespace has its `default` ServiceAccount. Not run, and why the workload does not need them: the node lifecycle controller (no Lease renewals), the garbage collector (no object has an owner), the namespace controller (no namespace is deleted), the EndpointSlice and Endpoints controllers (no Services), the TTL controller (it writes every Node as the cluster grows), pod GC (every node stays), the root CA publisher (one ConfigMap per namespace; pods mount no token), the workload controllers (no Deployments, Jobs or DaemonSets).", "`"+strings.Join(sandbox.ScaleControllers(), "`, `")+"`")
	p("- **No kube-scheduler**: every pod is created bound (`spec.nodeName`).")
	p("- **Simulated**: the Nodes and their status (hollow kubelets: one process, one shared pod informer and %d status writers for every node, where a real kubelet watches its own pods), each pod's address allocated by kovs-agent's own allocator, and one agent per node (a real policy-stream client with its own TLS connection and node-bound token, applying its share in memory: no OVS to program).", kubeletWorkers)
	p("- **Real**: etcd, kube-apiserver (its load attributed per phase below, from its own /metrics) and kovs-controller, with their defaults but for the controller's leader election timings (60/40/5 s) and its `--debug-receipts 65536` (a ring of when its NetworkPolicy and Pod informers received each version and when it wrote each generation to a node's stream, pulled after the fan-out's policy probes, its address probes and the churn: kovs's own clock).")
	if len(r.Config.ControllerFlags) > 0 {
		p("- **kovs-controller flags of this run** (KOVS_SCALE_CONTROLLER_FLAGS): `%s`.", strings.Join(r.Config.ControllerFlags, " "))
	}
}

func (r *Result) cpuSection(p func(string, ...any)) {
	names := []string{}
	for _, n := range measuredProcesses {
		if r.ran(n) {
			names = append(names, n)
		}
	}
	names = append(names, harnessProcess)
	p("## CPU seconds per phase and process (the machine has %s)", cpuCount())
	p("")
	p("| phase | wall | %s |", strings.Join(names, " | "))
	p("|---|---|%s", strings.Repeat("---|", len(names)))
	for _, ph := range r.Phases {
		wall := ph.End.Sub(ph.Start).Seconds()
		cells := make([]string, len(names))
		for i, n := range names {
			cells[i] = fmt.Sprintf("%.1f (%.0f %%)", ph.CPUSeconds[n], 100*ph.CPUSeconds[n]/math.Max(wall, 1e-9))
		}
		p("| %s | %.1f s | %s |", ph.Name, wall, strings.Join(cells, " | "))
	}
	p("")
	p("Whole run, from each process's start: ")
	p("")
	p("| process | CPU s | peak RSS | RSS at the end |")
	p("|---|---|---|---|")
	for _, u := range r.Processes {
		p("| %s | %.1f | %s | %s |", u.Name, u.CPUSeconds, mib(u.PeakRSS), mib(u.RSS))
	}
}

func (r *Result) auditSection(p func(string, ...any)) {
	if r.Audit.Total == 0 {
		return
	}
	p("## kube-apiserver requests by kovs-controller")
	p("")
	p("Counted by kube-apiserver's audit log (every request of the ServiceAccount kube-system/kovs-controller, Metadata level): %d in all.", r.Audit.Total)
	p("")
	p("| phase | requests | per second |")
	p("|---|---|---|")
	for _, ph := range r.Phases {
		n := r.Audit.PerPhase[ph.Name]
		p("| %s | %d | %.1f |", ph.Name, n, float64(n)/ph.End.Sub(ph.Start).Seconds())
	}
	p("")
	p("| request | count | kube-apiserver's answer time |")
	p("|---|---|---|")
	for i, k := range r.Audit.ByKind {
		if i == 12 {
			break
		}
		p("| %s | %d | %s |", k.Kind, k.Count, k.Latency.Summary())
	}
}

// ran reports whether the named process ran during the run (a run that failed early may
// have measured none).
func (r *Result) ran(name string) bool {
	if len(r.Processes) == 0 {
		return true
	}
	return slices.ContainsFunc(r.Processes, func(u ProcessUsage) bool { return u.Name == name })
}

// writeSplit adds the rows splitting kovs's time at kovs-controller's writes to the
// agents' streams, if the run recorded them.
func writeSplit(row func(phase, what, format string, args ...any), phase string, kc KovsClock) {
	if len(kc.Controller) == 0 && kc.NoWrite == 0 {
		return
	}
	row(phase, "... of it **kovs-controller's part**: its receipt to its write to the last concerned node's policy stream returning", "**%s**; %d changes with a write not in its ring (it overwrote %d)",
		kc.Controller.Summary(), kc.NoWrite, kc.WritesOverwritten)
	row(phase, "... of it the slowest concerned **simulated agent's part**: kovs-controller's write to that agent applying it (loopback, and the harness's CPU reading, decoding and applying: on a cluster, each node's own)", "%s", kc.Agents.Summary())
}
