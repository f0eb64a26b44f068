// Package pipeline is the OpenFlow pipeline of br-int, as data and pure functions: the
// tables (declared once, with fixed numbers and names), the register map, flow cookies,
// typed flows that render in ovs-ofctl syntax, the builders that compile a node's flows
// from its configuration, its pods and its tunnel peers, and a tracer that runs synthetic
// packets through compiled flows. It does no I/O: pkg/ovs installs what it builds.
//
// The pipeline routes; it never floods. Each node's gateway is an OVS internal port in the
// node's namespace that carries the pods' gateway address and MAC. OVS answers pods' ARP
// and neighbour solicitations for it, routes between local pods (MAC rewrite, TTL
// decrement), sends remote nodes' pod blocks into the Geneve tunnel (tun_dst / tun_ipv6_dst
// = that node, inner destination MAC = its gateway), and hands node addresses and
// everything outside the cluster CIDRs to the gateway port, where the host stack routes.
//
// TTL: every node whose gateway routes a packet decrements it once. OVS decrements when it
// routes a pod's packet or a packet from the tunnel; it does not decrement packets from the
// gateway port (the host routed those) nor packets it hands to the host (the host routes
// them, if it forwards them at all). Pod to remote pod is therefore two hops, as it would
// be through two routers.
//
// NetworkPolicy is enforced in EgressPolicy (on the source pod's node) and IngressPolicy
// (on the destination pod's node) with OpenFlow conjunctions: PolicyFlows compiles a
// node's share of the normalized policy (package policy) and its pod ports into clause
// flows whose number grows with the sum of protected pods, peer addresses and ports, one
// conj_id flow per rule, and default-deny flows for isolated pods and for pods whose
// policy has not arrived. The tracer models conjunctive lookups as OVS does.
//
// ovs-flows/README.md documents the tables, registers, cookies and golden files; the
// golden files in ovs-flows/golden are FormatByTable of the reference scenarios.
package pipeline
