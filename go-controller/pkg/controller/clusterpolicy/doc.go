// Package clusterpolicy is the meaning of ClusterNetworkPolicy
// (policy.networking.k8s.io/v1beta1, sigs.k8s.io/network-policy-api v0.3.0) in kovs: it
// checks what kovs can enforce as written ([Check]), compiles the policies against a
// view of the cluster into rules with resolved pods, addresses and ports in precedence
// order ([Compile]), and decides a connection from those rules and the NetworkPolicy
// tier between them ([Rules.Allows]), which is the reference the datapath is to be
// tested against, and the meet of two versions of the rules that the transition gate
// is to enforce during a change ([Meet]).
//
// # Semantics
//
// Tiers are evaluated Admin, then NetworkPolicy, then Baseline, per direction: the
// egress rules of the source pod and the ingress rules of the destination pod must both
// let a connection through. Within a tier the first matching rule decides: Accept and
// Deny are final for the direction (an egress Accept does not skip the destination's
// ingress rules), Pass skips the rest of the tier. A Pass in the Admin tier hands the
// connection to NetworkPolicy; a pod that NetworkPolicy isolates in the direction is
// decided there (the Baseline tier never sees it), any other pod goes on to the Baseline
// tier; what no tier decides is allowed.
//
// Precedence within a tier is the policy's priority (lower first), then, as kovs's
// choice where the API leaves equal priorities to the implementation, the policy's name,
// then the rule's position in the policy. The API only promises that rules of policies
// with equal priority are all applied to their own subjects; kovs makes the outcome of
// overlapping rules deterministic and documented (docs/cluster-network-policy.md).
//
// Subjects and pod peers never select host-network or terminated pods (the caller does
// not list them). Peers by namespaces and pods, by networks (CIDRs, matching every
// address in them, pods' included) and, in the experimental channel, by nodes (the
// addresses of node.status.addresses). Protocols by number, range and, in the
// experimental channel, destination named port, resolved on the destination pod: the
// subject of an ingress rule, the peer pod of an egress rule (networks and nodes have no
// named ports). No protocols: all traffic, ICMP included.
//
// A peer with no field set (an unknown field of a newer CRD), or with a label selector
// that is not valid (the API server does not check them in a CRD), fails closed as the
// API says for unreadable peers: an Accept rule ignores it, a Deny or Pass rule becomes a Deny of everything
// from or to its subject. DomainNames peers, which kovs cannot enforce, match nothing
// (the API allows them only in Accept rules, so this only ever accepts less); [Check]
// reports them, and the controller says so in a status condition.
package clusterpolicy
