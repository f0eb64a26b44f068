package pipeline

import (
	"fmt"
	"net/netip"
	"slices"
)

// TunnelVNI is the Geneve VNI (tun_id) of all pod traffic between nodes. One overlay, one
// key: the classifier accepts tunnel packets only with this key and from a known peer.
const TunnelVNI uint64 = 100

// Neighbour advertisement flags (the R, S and O bits of nd_reserved).
const (
	naRouter    uint32 = 0x80000000
	naSolicited uint32 = 0x40000000
	naOverride  uint32 = 0x20000000
)

// Priorities, per table. Flows of one table never overlap at equal priority (the tracer
// refuses a trace that would depend on it).
const (
	prioMiss = 0

	prioClassify = 200

	prioSpoofND       = 210 // a pod's ND messages, checked field by field
	prioSpoofNDReject = 205 // a pod's NS/NA that failed those checks
	prioSpoofSource   = 200 // a port's own L2/L3 source

	prioNeighborReply   = 200 // answered in OVS
	prioNeighborForward = 100 // delivered to the owner of the address
	prioNeighborDrop    = 90  // ND that must not reach conntrack

	prioConntrack   = 100
	prioCTHostInv   = 205 // the host's transit replies: see conntrackStateFlows
	prioCTInvalid   = 200
	prioCTEstab     = 190
	prioCTRelated   = 180
	prioPolicyEstab = 210
	prioPolicyRel   = 200

	// NetworkPolicy, in EgressPolicy and IngressPolicy (see flows_policy.go).
	prioPolicyFromGateway = 190 // the node reaches its own pods (IngressPolicy only)
	prioPolicyAllowAll    = 150 // rules with neither peers nor ports: one clause
	prioPolicyConj        = 100 // conjunction clauses and conj_id flows
	prioPolicyDeny        = 50  // default deny of isolated and pending pods

	prioL3Multicast    = 300
	prioL3GatewayReply = 250 // replies of connections the host forwarded: back to it
	prioL3Local        = 200 // local pods, the gateway, node addresses
	prioL3NoTransit    = 190 // tunnel traffic not for a local endpoint
	prioL3PeerReply    = 160 // replies to a remote node's host network: back through the tunnel
	prioL3Remote       = 150 // remote nodes' pod subnets
	prioL3Cluster      = 100 // unknown addresses inside the cluster CIDRs
	prioL3OffCluster   = 50  // everything else a pod sends: the node's network stack

	prioDecTTLSkip = 200
	prioDecTTL     = 100
	prioOutput     = 100

	prioCommitFromGateway = 110 // ConntrackCommit: marks what the host forwards
	prioOutputToHost      = 110 // Output: from the gateway back to it (translated by a Service)
	prioOutputMetered     = 105 // Output: to a pod with an ingress meter
)

// Builder compiles the flows of one node. It is immutable: every method is a pure function
// of the node configuration, the round, the pipeline's tables and its arguments.
type Builder struct {
	node  NodeConfig
	round Round
	// tables are the pipeline's, in order: every one gets its miss flow (BaseFlows).
	tables []Table
}

// NewBuilder validates node and returns a builder of the kovs pipeline (Stages) whose
// flows carry round in their cookie.
func NewBuilder(node NodeConfig, round Round) (*Builder, error) {
	return newBuilder(node, round, Tables())
}

func newBuilder(node NodeConfig, round Round, tables []Table) (*Builder, error) {
	if err := node.Validate(); err != nil {
		return nil, fmt.Errorf("node %q: %w", node.Name, err)
	}
	return &Builder{node: node.clone(), round: round, tables: tables}, nil
}

// Cookie is the cookie of a flow of object obj of category cat, in the builder's round:
// what a stage's flows carry.
func (b *Builder) Cookie(cat Category, obj uint32) Cookie { return NewCookie(b.round, cat, obj) }

// NodeFlows is every flow of the node: base, gateway, each pod and each peer.
func (b *Builder) NodeFlows(pods []PodPort, peers []TunnelPeer) ([]Flow, error) {
	flows := slices.Concat(b.BaseFlows(), b.GatewayFlows())
	for _, pod := range pods {
		podFlows, err := b.PodFlows(pod)
		if err != nil {
			return nil, err
		}
		flows = append(flows, podFlows...)
	}
	for _, peer := range peers {
		peerFlows, err := b.PeerFlows(peer)
		if err != nil {
			return nil, err
		}
		flows = append(flows, peerFlows...)
	}
	SortFlows(flows)
	return flows, nil
}

// flowSet collects the flows of one owner, all under one cookie.
type flowSet struct {
	cookie Cookie
	flows  []Flow
}

func (b *Builder) owner(cat Category, obj uint32) *flowSet {
	return &flowSet{cookie: NewCookie(b.round, cat, obj)}
}

func (s *flowSet) add(t Table, priority uint16, m Match, actions ...Action) {
	s.flows = append(s.flows, Flow{Table: t, Priority: priority, Cookie: s.cookie, Match: m, Actions: actions})
}

// ipProto is the protocol shorthand of a's family.
func ipProto(a netip.Addr) Protocol {
	if a.Is6() {
		return ProtoIPv6
	}
	return ProtoIPv4
}

// families are the protocols of the node's pod subnets, IPv4 first.
func (b *Builder) families() []Protocol {
	var protos []Protocol
	if b.node.hasFamily(false) {
		protos = append(protos, ProtoIPv4)
	}
	if b.node.hasFamily(true) {
		protos = append(protos, ProtoIPv6)
	}
	return protos
}
