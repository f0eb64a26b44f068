package sandbox

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
)

// The scale mode (Options.ControlPlaneOnly) runs the control plane and kovs-controller
// alone: the Nodes, their kubelets and the agents are simulated by the scale harness
// (test/e2e/scale), thousands of them in one process, with no namespaces or OVS.

// The scale mode's control plane runs what the scale harness's workload needs and no more
// (docs/scale.md, "What is simulated, and what is not"), so that kube-apiserver's load is
// what reaches kovs: no kube-scheduler (the harness creates every pod bound) and
// kube-controller-manager with scaleControllers only.

// scaleControllers are kube-controller-manager's controllers in the scale mode:
// serviceaccount-controller, because the ServiceAccount admission plugin refuses a pod
// whose namespace has no "default" ServiceAccount yet (and Up waits for default's); with
// nodePodCIDRs also node-ipam-controller, which allocates the spec.podCIDRs kovs-controller
// then reads. Left out, and why the workload does not need them: namespace-controller (no
// namespace is deleted during a run), garbage-collector-controller (no object has an
// owner), endpointslice-controller and endpoints-controller (no Services), ttl-controller
// (it writes an annotation to every Node as the cluster grows), pod-garbage-collector-
// controller (no pod is orphaned: every node stays), root-ca-certificate-publisher-
// controller (one ConfigMap per namespace; pods mount no token), node-lifecycle-controller
// (see above) and the workload controllers (no Deployments, Jobs or DaemonSets).
func scaleControllers(nodePodCIDRs bool) []string {
	c := []string{"serviceaccount-controller"}
	if nodePodCIDRs {
		c = append(c, "node-ipam-controller")
	}
	return c
}

// ScaleControllers are kube-controller-manager's controllers in the scale mode, for the
// scale harness's report.
func ScaleControllers() []string { return scaleControllers(false) }

// ScaleClusterCIDR is a pod address plan with room for 16,384 node blocks of /24, apart
// from the service CIDR: what `make scale` runs kovs-controller with.
const ScaleClusterCIDR = "100.64.0.0/10"

func (o *Options) validateControlPlaneOnly() error {
	switch {
	case o.Nodes != 0:
		return fmt.Errorf("--control-plane-only starts no nodes: use --nodes 0 (the scale harness simulates them)")
	case o.KubeProxy || o.Runtime == RuntimeContainerd:
		return fmt.Errorf("--control-plane-only runs no node processes: drop --kube-proxy and --runtime containerd")
	case !kovsPresent(o.KovsBinDir):
		return fmt.Errorf("--control-plane-only runs kovs-controller: run `make build` (no kovs binaries in %q)", o.KovsBinDir)
	}
	return o.validateClusterCIDRs()
}

func (o *Options) validateClusterCIDRs() error {
	for _, c := range o.ClusterCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return fmt.Errorf("--cluster-cidrs %q: %w", c, err)
		}
		if p.Addr().Is4() != o.Family.HasIPv4() && p.Addr().Is6() != o.Family.HasIPv6() {
			return fmt.Errorf("--cluster-cidrs %q is not of the sandbox's family %s", c, o.Family)
		}
	}
	return nil
}

// KovsAuditLog is where kube-apiserver logs kovs-controller's requests (Options.AuditKovs):
// one JSON audit event per line (beside the logs: a failed test does not print it).
func (l Layout) KovsAuditLog() string { return filepath.Join(l.Dir(), "audit-kovs.log") }

// kovsAuditPolicy logs the requests of kovs-controller's ServiceAccount at Metadata level
// (who, verb, resource, when; no bodies), once each (ResponseComplete, or Panic), and
// nothing else.
func kovsAuditPolicy() string {
	return `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
  users: ["system:serviceaccount:` + agentNamespace + `:` + controllerServiceAccount + `"]
- level: None
`
}

// auditArgs are kube-apiserver's flags for Options.AuditKovs (batched writes, so the log
// costs the requests little).
func (u *upRun) auditArgs() ([]string, error) {
	if !u.opts.AuditKovs {
		return nil, nil
	}
	policy := filepath.Join(u.layout.Dir(), "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(kovsAuditPolicy()), 0o644); err != nil {
		return nil, err
	}
	return []string{"--audit-policy-file", policy, "--audit-log-path", u.layout.KovsAuditLog(),
		"--audit-log-format", "json", "--audit-log-mode", "batch", "--audit-log-batch-max-wait", "1s", "--audit-log-maxsize", "0"}, nil
}

// scaleLeaderElection are kovs-controller's leader election timings in the scale mode:
// 60 s, 40 s, 5 s instead of 15 s, 10 s, 2 s. Nothing restarts the controller there (no
// kubelet runs it), and on 2 CPUs the 5,000 simulated nodes keep kube-apiserver so busy
// that it once took 10-11 s to answer one renewal of the controller's Lease: with the
// defaults the controller stopped leading and exited (docs/scale.md), as an operator of
// an overloaded control plane would see its replicas fail over in a loop.
var scaleLeaderElection = []string{"--leader-elect-lease-duration", "60s",
	"--leader-elect-renew-deadline", "40s", "--leader-elect-retry-period", "5s"}

// scaleReceipts has kovs-controller keep when its NetworkPolicy informer received each of
// the last 65,536 versions (served at /debug/receipts on its metrics listener): the scale
// harness starts kovs's own time of a change there. 65,536 holds a 5,000-node run's
// 10,000 policies and its churn's changes. --debug-pprof serves Go's profiles on the same
// loopback listener, so that a run's CPU and heap can be profiled while it runs
// (docs/scale.md says how).
var scaleReceipts = []string{"--debug-receipts", "65536", "--debug-pprof"}
