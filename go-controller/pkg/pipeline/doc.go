// Package pipeline is the OpenFlow pipeline of br-int, as data and pure functions: the
// tables (declared once, with fixed numbers and names), the register map, flow cookies,
// typed flows whose match and actions render in ovs-ofctl syntax (as ovs.Flow values),
// the stages that compile a node's flows and groups, and a tracer that runs synthetic
// packets through compiled flows. It does no I/O: pkg/ovs installs what it builds.
//
// A Stage is a value: its tables, its cookie category and a pure function from the node's
// Snapshot to the objects that own its flows and groups. Stages() is the one registry:
// Registry.Compile compiles every object afresh (the golden files, the tracer, the
// tests), and a Compiler, which the agent holds, compiles an object again only when its
// input changed. Registry.Check is the invariants every registered stage keeps.
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
// (on the destination pod's node) with OpenFlow conjunctions: the policy stage compiles a
// node's share of the normalized policy (package policy) and its pod ports into clause
// flows whose number grows with the sum of protected pods, peer addresses and ports, one
// conj_id flow per rule, and default-deny flows for isolated pods and for pods whose
// policy has not arrived. The tracer models conjunctive lookups as OVS does.
//
// ovs-flows/README.md documents the tables, registers, cookies and golden files; the
// golden files in ovs-flows/golden are FormatByTable of the reference scenarios.
package pipeline
