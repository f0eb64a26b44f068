package kovsctl

import (
	"fmt"
	"strings"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// cookieOwners names the owner a flow's cookie encodes.
type cookieOwners struct {
	nodes map[string]nodeInfo
	// rules names NetworkPolicy rules by cookie object; nil when they could not be listed.
	rules policyRules
	// services names Service ports by cookie object; nil when they could not be listed.
	services serviceNames
	// isolation says, by "ns/name ingress|egress", which NetworkPolicies isolate a pod
	// whose default deny the trace ended in.
	isolation map[string]string
}

// describe names the owner of a flow; ports maps the node's ofports to what they are.
func (o cookieOwners) describe(c pipeline.Cookie, ports map[int]string) string {
	switch c.Category() {
	case pipeline.CategoryPolicy:
		return o.describePolicy(c, ports)
	case pipeline.CategoryClusterPolicy:
		return o.describeCluster(c)
	case pipeline.CategoryBase:
		return "pipeline"
	case pipeline.CategoryGateway:
		return "gateway"
	case pipeline.CategoryPod:
		if name, ok := ports[int(c.Object())]; ok {
			return name
		}
		return fmt.Sprintf("pod on port %d", c.Object())
	case pipeline.CategoryTunnelPeer:
		for name := range o.nodes {
			if pipeline.PeerObjectID(name) == c.Object() {
				return "peer node " + name
			}
		}
		return "a peer node"
	case pipeline.CategoryService:
		return o.describeService(c)
	case pipeline.CategoryLearned:
		if c.LearnedTranslation() {
			return "learned SCTP Service translation (an association's pin to its endpoint, or its replies' un-NAT)"
		}
		if c.LearnedAffinity() {
			return "learned Service affinity (a client's endpoint)"
		}
		return "learned SCTP reply (of an association policy allowed)"
	case 0:
		return "not a kovs flow"
	}
	return fmt.Sprintf("cookie %s", c)
}

// describePolicy names a NetworkPolicy flow: the rule that allows, or the pod whose
// default deny drops.
func (o cookieOwners) describePolicy(c pipeline.Cookie, ports map[int]string) string {
	pod := strings.TrimPrefix(describePort(ports, c.Object()), "pod ")
	switch c.PolicyKind() {
	case pipeline.PolicyKindRule:
		return "NetworkPolicy " + o.ruleName(c.Object())
	case pipeline.PolicyKindClause:
		return "a clause of NetworkPolicy " + o.ruleName(c.Object()) + " (and of the other rules with that clause)"
	case pipeline.PolicyKindIngressDeny:
		return "default deny of " + pod + " (" + o.isolated(pod, "ingress") + ")"
	case pipeline.PolicyKindEgressDeny:
		return "default deny of " + pod + " (" + o.isolated(pod, "egress") + ")"
	case pipeline.PolicyKindPending:
		return "default deny of " + pod + " (its NetworkPolicy has not arrived from kovs-controller yet)"
	}
	return fmt.Sprintf("NetworkPolicy flow %s", c)
}

// ruleName is the rule a cookie object stands for, or a note that it is none of the
// current NetworkPolicies' rules.
func (o cookieOwners) ruleName(obj uint32) string {
	if name, ok := o.rules.name(obj); ok {
		return name
	}
	return fmt.Sprintf("rule %#x (no current NetworkPolicy rule has this ID hash)", obj)
}

func describePort(ports map[int]string, ofport uint32) string {
	if name, ok := ports[int(ofport)]; ok {
		return name
	}
	return fmt.Sprintf("the pod on port %d", ofport)
}

// isolated is why a pod is isolated in a direction, when the trace looked it up.
func (o cookieOwners) isolated(pod, dir string) string {
	if why, ok := o.isolation[pod+" "+dir]; ok {
		return why
	}
	return "isolated for " + dir
}
