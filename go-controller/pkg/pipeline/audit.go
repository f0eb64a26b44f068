package pipeline

import (
	"fmt"

	"github.com/kovs-net/kovs/go-controller/pkg/audit"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// Audit is what the node's policy audit log records (docs/audit.md): the verdicts that the
// kovs.io/audit-log annotation turned on, per Namespace for its NetworkPolicies (their
// allows, and the default deny of its isolated pods) and per ClusterNetworkPolicy, and
// the meter every logged packet's copy to the agent passes.
type Audit struct {
	// Meter is the OpenFlow meter of the copies (AuditMeterID on a node).
	Meter           uint32
	Namespaces      map[string]audit.Verdicts
	ClusterPolicies map[string]audit.Verdicts
}

// AuditMeterID is the meter the agent creates for the audit log's packet-ins: above the
// pods' bandwidth meters (their ofport, and 65536 + their ofport).
const AuditMeterID = 1 << 20

// Controller sends a copy of the packet to the agent (an OpenFlow packet-in on every
// connection that asked for them, `ovs-ofctl monitor`), through meter Meter, with UserData
// (the audit verdict's code). The packet itself goes on with the flow's next action: a
// logged flow decides exactly as it would unlogged.
type Controller struct {
	UserData byte
	Meter    uint32
}

func (a Controller) String() string {
	return fmt.Sprintf("controller(userdata=%02x,meter_id=%d)", a.UserData, a.Meter)
}

// logs is the action that logs verdict v for an object whose annotation allowed vs: nil
// when it is not logged.
func (a *Audit) logs(vs audit.Verdicts, v audit.Verdict) []Action {
	if a == nil || !vs.Has(v) {
		return nil
	}
	return []Action{Controller{UserData: v.Code(), Meter: a.Meter}}
}

// namespace is the verdicts logged for the NetworkPolicies of namespace ns.
func (a *Audit) namespace(ns string) audit.Verdicts {
	if a == nil {
		return 0
	}
	return a.Namespaces[ns]
}

// clusterPolicy is the verdicts logged for ClusterNetworkPolicy name.
func (a *Audit) clusterPolicy(name string) audit.Verdicts {
	if a == nil {
		return 0
	}
	return a.ClusterPolicies[name]
}

// ClusterVerdict is the audit verdict of a ClusterNetworkPolicy action.
func ClusterVerdict(a policy.ClusterAction) audit.Verdict {
	switch a {
	case policy.ClusterAccept:
		return audit.Allow
	case policy.ClusterPass:
		return audit.Pass
	}
	return audit.Deny
}
