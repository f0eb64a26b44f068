package harness

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config sizes a run. The full size is issue 17's: 5,000 nodes, 10 pods per node, one
// namespace per node (50,000 pods in 5,000 namespaces), 2 policies per namespace (10,000),
// then 5 minutes of churn at 100 pod creations and 100 deletions and 10 policy changes per
// second.
type Config struct {
	Nodes             int
	PodsPerNode       int
	Namespaces        int
	PoliciesPerNS     int
	PodChurnPerSecond int
	PolicyChurnPerSec int
	ChurnDuration     time.Duration
	SpanProbes        int // isolated policy changes measured one at a time
	// FanOutProbes is how many changes that reach every node the fan-out phase makes of
	// each kind (a policy over one pod on every node; a pod entering and leaving the peers
	// of such a policy); 0 skips the phase.
	FanOutProbes int
	// ChurnSteps are churn rates, as factors of the churn's (PodChurnPerSecond and
	// PolicyChurnPerSec), run for StepDuration each after the final check, in order, until
	// one finds kube-apiserver's writes above their 1 s SLO; none: no steps.
	ChurnSteps   []float64
	StepDuration time.Duration
	// Failover runs the failover phase last: the leading kovs-controller killed and the
	// standby (the sandbox runs two replicas then, as dist does) taking over.
	Failover bool
	// ControllerFlags are extra kovs-controller flags (KOVS_SCALE_CONTROLLER_FLAGS,
	// space-separated --name=value): a run that compares a choice, such as
	// --agent-token-verification=review against the default.
	ControllerFlags []string
	// LeaseRenewInterval is how often each hollow kubelet renews its node's Lease; 0 (the
	// default) renews none: kovs-controller reads no node Lease and the scale mode runs no
	// node lifecycle controller, so renewals would only load kube-apiserver (kubelet's
	// own interval is 10 s; KOVS_SCALE_LEASE_RENEW=10s turns them back on).
	LeaseRenewInterval  time.Duration
	Seed                uint64
	CreateConcurrency   int           // writers of the initial workload
	ConvergenceTimeout  time.Duration // for each wait for every agent to converge
	RealizationDeadline time.Duration // a policy change not realized by then counts as lost
}

// FullSize is `make scale`'s default.
func FullSize() Config {
	return Config{Nodes: 5000, PodsPerNode: 10, Namespaces: 5000, PoliciesPerNS: 2,
		PodChurnPerSecond: 100, PolicyChurnPerSec: 10, ChurnDuration: 5 * time.Minute, SpanProbes: 20,
		FanOutProbes: 5, ChurnSteps: []float64{0.25, 0.5, 1, 2, 4}, StepDuration: time.Minute, Failover: true,
		Seed: 17, CreateConcurrency: 32,
		ConvergenceTimeout: 30 * time.Minute, RealizationDeadline: 60 * time.Second}
}

// TestSize is the correctness run of `make test`: 200 nodes, a short churn.
func TestSize() Config {
	c := FullSize()
	c.Nodes, c.Namespaces = 200, 200
	c.PodChurnPerSecond, c.PolicyChurnPerSec, c.ChurnDuration, c.SpanProbes = 20, 10, 20*time.Second, 5
	c.FanOutProbes, c.ChurnSteps, c.StepDuration = 2, []float64{2}, 10*time.Second
	c.Failover = false // the scale mode's 60 s Lease would add a minute to make test
	c.ConvergenceTimeout = 2 * time.Minute
	return c
}

// FromEnv overrides c with the KOVS_SCALE_* variables that are set: NODES, PODS_PER_NODE,
// NAMESPACES, POLICIES_PER_NS, POD_CHURN, POLICY_CHURN (per second), CHURN_DURATION (a
// Go duration), SPAN_PROBES, FANOUT_PROBES, CHURN_STEPS (factors, comma-separated; empty:
// none), STEP_DURATION, FAILOVER (true or false), SEED, LEASE_RENEW (a Go duration; 0
// renews no Lease), CONTROLLER_FLAGS (space-separated --name=value).
func (c Config) FromEnv() (Config, error) {
	ints := map[string]*int{"NODES": &c.Nodes, "PODS_PER_NODE": &c.PodsPerNode, "NAMESPACES": &c.Namespaces,
		"POLICIES_PER_NS": &c.PoliciesPerNS, "POD_CHURN": &c.PodChurnPerSecond, "POLICY_CHURN": &c.PolicyChurnPerSec,
		"SPAN_PROBES": &c.SpanProbes, "FANOUT_PROBES": &c.FanOutProbes}
	for name, p := range ints {
		v, ok := os.LookupEnv("KOVS_SCALE_" + name)
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return c, fmt.Errorf("KOVS_SCALE_%s=%q: want an integer: %w", name, v, err)
		}
		*p = n
	}
	durations := map[string]*time.Duration{"CHURN_DURATION": &c.ChurnDuration, "LEASE_RENEW": &c.LeaseRenewInterval,
		"STEP_DURATION": &c.StepDuration}
	for name, p := range durations {
		v, ok := os.LookupEnv("KOVS_SCALE_" + name)
		if !ok {
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return c, fmt.Errorf("KOVS_SCALE_%s=%q: want a duration like 5m: %w", name, v, err)
		}
		*p = d
	}
	if v, ok := os.LookupEnv("KOVS_SCALE_CHURN_STEPS"); ok {
		c.ChurnSteps = nil
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f == "" {
				continue
			}
			x, err := strconv.ParseFloat(f, 64)
			if err != nil {
				return c, fmt.Errorf("KOVS_SCALE_CHURN_STEPS=%q: want factors of the churn rates like 0.5,1,2: %w", v, err)
			}
			c.ChurnSteps = append(c.ChurnSteps, x)
		}
	}
	if v, ok := os.LookupEnv("KOVS_SCALE_FAILOVER"); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return c, fmt.Errorf("KOVS_SCALE_FAILOVER=%q: want true or false: %w", v, err)
		}
		c.Failover = b
	}
	if v, ok := os.LookupEnv("KOVS_SCALE_CONTROLLER_FLAGS"); ok {
		c.ControllerFlags = strings.Fields(v)
		for _, f := range c.ControllerFlags {
			if !strings.HasPrefix(f, "--") || !strings.Contains(f, "=") {
				return c, fmt.Errorf("KOVS_SCALE_CONTROLLER_FLAGS: %q: give each flag as --name=value", f)
			}
		}
	}
	if v, ok := os.LookupEnv("KOVS_SCALE_SEED"); ok {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return c, fmt.Errorf("KOVS_SCALE_SEED=%q: %w", v, err)
		}
		c.Seed = s
	}
	return c, c.Validate()
}

// Validate refuses sizes the harness cannot run.
func (c Config) Validate() error {
	switch {
	case c.Nodes < 1 || c.Nodes > 16384:
		return fmt.Errorf("nodes %d: use 1 to 16384 (the scale cluster CIDR has 16,384 node blocks)", c.Nodes)
	case c.PodsPerNode < 0 || c.PodsPerNode > 200:
		return fmt.Errorf("pods per node %d: use 0 to 200 (a node block is a /24)", c.PodsPerNode)
	case c.Namespaces < 1:
		return fmt.Errorf("namespaces %d: use at least 1", c.Namespaces)
	case c.PoliciesPerNS < 0 || c.PoliciesPerNS > 2:
		return fmt.Errorf("policies per namespace %d: use 0, 1 or 2 (np-1 and np-2 of bench shape (a))", c.PoliciesPerNS)
	case slices.ContainsFunc(c.ChurnSteps, func(f float64) bool { return !(f > 0) }) || (len(c.ChurnSteps) > 0 && c.StepDuration <= 0):
		return fmt.Errorf("churn steps %v for %s: want positive factors and a positive duration", c.ChurnSteps, c.StepDuration)
	case c.SpanProbes < 0 || c.FanOutProbes < 0:
		return fmt.Errorf("span probes %d, fan-out probes %d: must not be negative", c.SpanProbes, c.FanOutProbes)
	case c.PodChurnPerSecond < 0 || c.PolicyChurnPerSec < 0 || c.ChurnDuration < 0:
		return fmt.Errorf("churn rates and duration must not be negative")
	case c.LeaseRenewInterval < 0 || c.CreateConcurrency < 1:
		return fmt.Errorf("lease renew interval must not be negative, create concurrency must be positive")
	}
	return nil
}

// Pods is the size of the initial workload.
func (c Config) Pods() int { return c.Nodes * c.PodsPerNode }
