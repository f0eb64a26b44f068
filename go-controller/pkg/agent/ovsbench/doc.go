// Package ovsbench benchmarks kovs-agent's NetworkPolicy enforcement against a real
// Open vSwitch: a node's share of 1,000 policies over 1,000 local pods is compiled by the
// pipeline, installed on a private ovs-vswitchd (pkg/ovs/ovstest: userspace datapath,
// br-int in fail_mode secure) in one bundle, and then changed by one delta through the
// agent's own NodePolicy, NodeState and FlowSyncer. OVS accepts flows for ofports that
// no port holds, so the 1,000 pod ports are not created.
//
// Installing needs root and the openvswitch-switch binaries; without them those
// sub-benchmarks skip with a message saying why (compiling runs anywhere). Run them with
//
//	go test -run '^$' -bench AgentPolicyInstall ./go-controller/pkg/agent/ovsbench
package ovsbench
