// Package plugin is kovs-cni, the CNI plugin (spec 1.1.0: ADD, DEL, CHECK, GC, STATUS,
// VERSION). It is a thin client of kovs-agent (see package cni for the protocol): the
// agent knows the pod's addresses and owns br-int; the plugin does what only a process in
// the runtime's context can do, creating the pod's veth and configuring the pod end
// inside the pod's network namespace.
//
// The network config (one plugin in the conflist kovs-agent writes):
//
//	{"cniVersion": "1.1.0", "name": "kovs", "plugins": [
//	    {"type": "kovs-cni", "socket": "/var/run/kovs/cni.sock", "logFile": "/var/log/kovs/cni.log"}
//	]}
//
// The pod is identified by CNI_ARGS K8S_POD_NAMESPACE, K8S_POD_NAME and K8S_POD_UID, as
// Kubernetes runtimes pass them (with IgnoreUnknown=1).
//
// Kernel access happens in the calling thread's network namespace (the runtime's, i.e.
// the node's) and, through ns.NetNS.Do, in the pod's; tests that exercise it need root
// and live in package plugin/roottest.
package plugin
