// Package policy is the normalized form of Kubernetes NetworkPolicy that kovs-controller
// computes and each kovs-agent enforces: pure data, encoded as JSON, with no Kubernetes
// types. It is modelled on Antrea's internal NetworkPolicy API (AppliedToGroup,
// AddressGroup, NetworkPolicy rules), simplified.
//
// # The model
//
// A [Rule] allows traffic in one [Direction] between the pods of an [AppliedToSet] (the
// destinations of an ingress rule, the sources of an egress rule) and the addresses of
// its peer [AddressSet]s (any address when it has none), to one of its [Port]s (any port
// when it has none). Rules only allow, and allow rules form a union: a pod's traffic in a
// direction passes if the pod is not isolated in that direction ([Isolation]) or if any
// rule admits it. Replies of allowed connections, and traffic from a node to its own
// pods, are the datapath's business and always pass.
//
// The three kinds of object reference each other by ID, so that the agent can program
// OpenFlow `conjunction` flows whose number grows with the sum, not the product, of
// selected pods, peers and ports: one conjunction per rule, with the applied-to pods, the
// peer addresses and the ports as its dimensions.
//
//   - Address sets are shared by every rule that selects the same peers (same namespace
//     or namespaceSelector, same podSelector): a thousand policies that allow "from
//     app=web" reference one set. Pod addresses are /32 and /128 prefixes (a dual-stack
//     pod contributes both); an ipBlock is its CIDR minus its exceptions, as the minimal
//     list of prefixes ([SubtractPrefixes]). IDs derive from the selectors or the
//     content, so they are stable across controller restarts.
//   - Applied-to sets are shared in the same way; in a node's share they hold only the
//     node's pods. A pod is listed, and isolated, before it has addresses: it is
//     identified by namespace, name and UID, so it is protected from its first packet.
//   - Named ports are resolved by the controller, per destination pod: an ingress rule
//     with a named port becomes one rule per number, each applied to the pods that
//     resolve the name to that number; an egress rule splits its peers in the same way,
//     its ipBlock peers becoming the addresses of the pods in them that resolve the name
//     to that number (an address that is no pod has no named port).
//     Rule IDs carry the split ("x/web/ingress/0/tcp-8080").
//
// # Shares and deltas
//
// A [NodeShare] is everything one node needs: the rules whose applied-to set has pods on
// the node, those sets restricted to the node's pods, the address sets the rules
// reference, the node's [Isolation], and the node's pods the controller has evaluated
// (all of them, selected or not: an agent keeps a new pod closed until its share lists
// it). The controller sends a snapshot on connect and
// then [Delta]s, each from the generation of the previous one; [Delta.Apply] checks that
// a delta fits before changing anything, so a receiver that missed one asks for a new
// snapshot instead of drifting. Address sets change by patches (added and removed
// addresses), everything else is replaced whole.
//
// [NodeShare.AllowsIngress] and [NodeShare.AllowsEgress] are the reference meaning of a
// share, against which tests check both the controller and the datapath.
package policy
