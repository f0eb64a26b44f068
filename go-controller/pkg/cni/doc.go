// Package cni is the protocol between kovs-cni (the CNI plugin binary the container
// runtime executes) and kovs-agent (the node daemon that owns br-int): request and
// answer types, the Client the plugin uses, and the Server that serves the agent's
// Handler. The plugin itself is in package cni/plugin.
//
// # Transport
//
// HTTP/1.1 with JSON bodies over a unix socket (default /var/run/kovs/cni.sock, the
// "socket" field of the network config). Only root may use it: Server creates the
// socket's directory 0700 and the socket 0600 (bound in a private directory and renamed
// into place, so it is never reachable with looser permissions). Unix sockets are reached
// through the filesystem, so the plugin, run in the node's network namespace, reaches the
// agent whatever namespace the agent runs in.
//
// # Endpoints
//
// Paths carry the protocol version; a change that old peers would misread gets /v2.
// Unknown fields are ignored, so fields can be added within v1.
//
//	POST /v1/add          AddRequest      -> 200 PodNetworkConfig
//	POST /v1/detach       DetachRequest   -> 204
//	POST /v1/check        AttachRequest   -> 204
//	POST /v1/gc           GCRequest       -> 204
//	GET  /v1/status                       -> 204
//
// An ADD is one call: with the veth created (the host end up, the pod end down), add asks
// the agent to allocate the pod's addresses and MAC from its node's blocks, add the host
// end to br-int as an OVS port whose external_ids carry the pod's identity and addresses,
// and answer, with the config the pod end gets, once the pod's flows (and policy) are
// installed. Nothing on its path asks the API server. DEL is detach, which also releases
// the addresses; it must be idempotent. CHECK, GC and STATUS map to check, gc and status.
// (Before 2026-12 an ADD was two calls, pod-network and attach, and the addresses were
// kovs-controller's; an old kovs-cni calling a new agent gets an error naming the path.)
//
// # Errors
//
// A failed call answers a non-2xx status (400 for CodeInvalidConfig, 404 for
// CodeUnknownContainer, 503 for CodeTryAgainLater and CodeNotAvailable, 500 otherwise)
// with an Error body:
//
//	{"code": 11, "msg": "no address for pod default/web: node node-1: node block 10.244.1.0/24 has no free pod address: ...", "details": ""}
//
// The code is a CNI error code: the plugin returns it to the runtime as is, with the
// message prefixed by what the plugin was doing. Messages are for people: they end up in
// `kubectl describe pod`. When nothing accepts on the socket the Client returns
// CodeTryAgainLater with ErrAgentUnreachable in the chain.
//
// # Names
//
// The host end of a sandbox's veth, and its OVS port, is HostInterfaceName(containerID):
// "kv" and the first 12 hex digits of the container ID.
package cni
