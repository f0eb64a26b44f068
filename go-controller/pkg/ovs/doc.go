// Package ovs is the lowest layer of kovs: the clients of Open vSwitch that the
// agent, the CNI plugin and kovsctl use. It knows nothing of Kubernetes and
// nothing of the kovs pipeline. Flows and groups come in and go out as typed
// values: a [FlowKey] (table, priority, match), a [Flow] (key, cookie,
// actions) and a [Group] (ID, type, selection, buckets), whose match and
// actions are in ovs-ofctl's canonical syntax (pkg/pipeline, above this
// package, writes those). This package alone writes flow and group lines and
// bundle files, and parses dump-flows, dump-groups and ofproto/trace output
// ([ParseFlowDump], [FlowEntry.Flow], [GroupEntry.Group], [ParseTrace]).
//
// # The Open_vSwitch database
//
// [OVSDB] is a libovsdb client of ovsdb-server, created from an endpoint such
// as "unix:/var/run/openvswitch/db.sock". It monitors the Open_vSwitch,
// Bridge, Port and Interface tables (only the columns kovs uses, see
// ovsdb_model.go) into a cache that reads come from, and it reconnects and
// re-monitors by itself; calls made while it is disconnected wait for the
// reconnection, bounded by their context. Every write is one transaction, is
// idempotent, and costs nothing when the database already matches:
//
//   - [OVSDB.EnsureBridge] creates a bridge with its internal port (as
//     ovs-vsctl add-br does) or updates the columns kovs owns, then waits for
//     ovs-vswitchd to apply it (next_cfg/cur_cfg, as ovs-vsctl does) and
//     checks that it did create the bridge.
//   - [OVSDB.EnsurePort] creates or updates a port and its interface and
//     returns the ofport ovs-vswitchd assigned, or the Interface error column.
//   - [OVSDB.DeletePort], [OVSDB.Ports], [OVSDB.FindPorts], and the
//     Open_vSwitch row helpers ([OVSDB.SetOtherConfig] for flow-restore-wait,
//     [OVSDB.DatapathTypes]).
//
// The agent depends on the [Store] interface ([BridgeStore], [PortStore],
// [SwitchConfig]); package ovs/ovsfake implements it in memory for unit tests
// (only tests import that package, so no binary carries it).
//
// # OpenFlow
//
// [OpenFlow] programs one bridge by running ovs-ofctl -O OpenFlow15 against
// its management socket (unix:<rundir>/<bridge>.mgmt), because kovs flows use
// conjunction, ct() and NXM fields that typed OpenFlow libraries do not cover.
// [OpenFlow.Bundle] applies [FlowMod] and [GroupMod] values ([Flow.Add],
// [FlowKey.DeleteStrict], [Group.Add], [Group.Modify], [DeleteGroup]) as one
// atomic bundle: all or nothing, and a [BundleError] that names the failing
// line.
// [OpenFlow.DumpFlows] and [OpenFlow.DeleteFlows] select flows by cookie and
// mask, which is how the agent finds and removes the flows of an older round.
// [Vswitchd] runs ovs-appctl: ofproto/trace (read with [ParseTrace]),
// tnl/neigh/set and coverage/read-counter ([OpenFlow.PacketInsOverflowed]).
//
// The agent depends on the [FlowClient] interface; package ovs/ovsfake
// implements it in memory for unit tests. Commands run through the [Exec]
// interface, so unit tests of this package replace ovs-ofctl with a fake.
//
// Things about OVS 3.1 worth knowing, found by the integration tests:
//
//   - Under OpenFlow 1.1+ a modify never changes a flow's cookie; an add with
//     the same table, priority and match replaces the flow, cookie included.
//   - A delete rejects actions and an unmasked cookie; [FlowMod] strips the
//     former and turns the latter into an exact match.
//   - A strict delete without table= deletes the flow from every table (a
//     strict modify only touches table 0); [FlowMod] adds table=0 to it.
//   - ovs-ofctl names the failing line of a bundle only for parse errors;
//     for a message ovs-vswitchd rejects it prints the decoded message, which
//     [BundleError] matches back to the line.
//   - ovs-vswitchd lists the "system" datapath type even when the openvswitch
//     kernel module is absent; only creating a bridge tells.
//
// Integration tests against a real ovsdb-server and ovs-vswitchd live in
// pkg/ovs/integration (they need root); pkg/ovs/ovstest starts the daemons.
package ovs
