// Package ovsbench benchmarks kovs-agent's NetworkPolicy enforcement against a real
// Open vSwitch: a node's share of 1,000 policies over 1,000 local pods is compiled by the
// pipeline, installed on a private ovs-vswitchd (pkg/ovs/ovstest: userspace datapath,
// br-int in fail_mode secure) in one bundle, and then changed by one delta through the
// agent's own NodePolicy, NodeState and FlowSyncer.
//
// The benchmarks need root and the openvswitch-switch binaries; without them they skip
// with a message saying why. Run them with
//
//	go test -run '^$' -bench AgentPolicyInstall ./go-controller/pkg/agent/ovsbench
package ovsbench
