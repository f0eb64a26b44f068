package audit

import "time"

// Record is one line of the audit log: a new connection's first packet and the rule that
// decided it, on the node that decided it.
type Record struct {
	Time time.Time `json:"time"`
	Node string    `json:"node"`
	// Direction is the rule's: Ingress (the destination pod's) or Egress (the source's).
	Direction string  `json:"direction"`
	Verdict   Verdict `json:"verdict"`
	// Kind is NetworkPolicy or ClusterNetworkPolicy.
	Kind string `json:"kind"`
	// Namespace and Name name the policy (a ClusterNetworkPolicy has no namespace). A
	// NetworkPolicy deny is the default deny of the isolated pod: Namespace is the pod's,
	// Name is empty and Rule is "default-deny".
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	Rule      string `json:"rule"`
	// Tier is a ClusterNetworkPolicy's (Admin or Baseline).
	Tier string `json:"tier,omitempty"`
	// SrcPod and DstPod are "namespace/name" when the address is a pod's.
	SrcPod   string `json:"srcPod,omitempty"`
	SrcIP    string `json:"srcIP"`
	SrcPort  uint16 `json:"srcPort,omitempty"`
	DstPod   string `json:"dstPod,omitempty"`
	DstIP    string `json:"dstIP"`
	DstPort  uint16 `json:"dstPort,omitempty"`
	Protocol string `json:"protocol"`
	// Count is how many packets of the same flow the line stands for: denies of one flow
	// within the collapse window are one line.
	Count int `json:"count"`
}

// flowKey is what makes two denies "the same flow": the deciding rule and the 5-tuple.
type flowKey struct {
	kind, namespace, name, rule, direction string
	verdict                                Verdict
	proto, src, dst                        string
	srcPort, dstPort                       uint16
}

func (r Record) key() flowKey {
	return flowKey{kind: r.Kind, namespace: r.Namespace, name: r.Name, rule: r.Rule, direction: r.Direction,
		verdict: r.Verdict, proto: r.Protocol, src: r.SrcIP, dst: r.DstIP, srcPort: r.SrcPort, dstPort: r.DstPort}
}
