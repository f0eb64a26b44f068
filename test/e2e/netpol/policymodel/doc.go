// Package policymodel is an independent model of Kubernetes NetworkPolicy
// (networking.k8s.io/v1): given the namespaces, pods and policies of a cluster, it says
// whether a connection from one pod to another is allowed. The truth-table suite checks
// every expectation of its cases against it offline (test/e2e/netpol, TestCasesAgreeWithModel)
// and uses it to know which cells stay denied while a step is applied.
//
// It is written from the API's documentation, not from kovs: the field comments of the
// networking.k8s.io/v1 types and the NetworkPolicy concept page of kubernetes.io. It shares
// no code with kovs-controller, not even the label-selector code of k8s.io/apimachinery
// that the controller uses: selectors, ports, named ports and ipBlocks are evaluated here
// from their documented meaning, so a misreading in either place shows up as a
// disagreement. What the documentation says, and what this model does:
//
//   - A pod is isolated for ingress (egress) when a policy of its namespace selects it
//     (spec.podSelector) and lists Ingress (Egress) in policyTypes. policyTypes left empty
//     means Ingress, plus Egress when the policy has egress rules. A connection is allowed
//     when the source may send it (not isolated for egress, or some egress rule of a
//     policy selecting it allows it) and the destination may receive it (likewise for
//     ingress). Rules only allow; policies add up.
//   - A rule allows a connection when one of its peers matches the other end (no peers:
//     every end) and one of its ports matches (no ports: every port and protocol). A port
//     matches on its protocol (default TCP) and, when set, its number, its range up to
//     endPort, or its name: a name is looked up in the container ports of the destination
//     pod, with the same protocol, whatever the peer that matched the destination (a
//     podSelector, a namespaceSelector, an ipBlock or no peers). The documentation says a
//     named port is "on a pod"; a destination that is not a pod (a hostNetwork pod's
//     address is its node's) has none, as kube-network-policies reads it.
//   - A peer is a podSelector (pods of the policy's namespace), a namespaceSelector (all
//     pods of the selected namespaces), both (the selected pods of the selected
//     namespaces), or an ipBlock (addresses in cidr and in none of except).
//   - Label selectors: matchLabels and matchExpressions must all hold; In and NotIn take
//     values, Exists and DoesNotExist none; NotIn and DoesNotExist hold for a label that is
//     not there. An empty selector selects everything. Every namespace carries
//     kubernetes.io/metadata.name=<name>, set by the API server.
//   - "A pod cannot block access to itself": a pod reaching its own address is allowed.
//   - "Traffic to and from the node where a Pod is running is always allowed."
//   - hostNetwork pods are not selected by podSelector or namespaceSelector, as targets or
//     peers; their traffic is the node's. (The documentation allows a plugin to tell them
//     apart instead; it calls ignoring them the most common implementation, and that is
//     the one modelled.)
//
// What the documentation leaves undefined is an error here (ErrUnspecified), never a
// guess: which address a node's traffic to a pod on another node has when an ipBlock
// would decide it.
package policymodel
