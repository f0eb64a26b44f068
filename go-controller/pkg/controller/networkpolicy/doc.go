// Package networkpolicy is the NetworkPolicy compiler of kovs-controller. It watches Namespaces,
// Pods and NetworkPolicies and keeps, for every node, the node's share of the normalized
// policy of package [github.com/kovs-net/kovs/go-controller/pkg/policy]: the rules that
// apply to the node's pods, their applied-to sets restricted to those pods, the address
// sets they reference, and which of the node's pods are isolated. Agents subscribe with
// [Compiler.Watch]: a snapshot, then deltas. The transport (an authenticated stream per
// agent) is built on top of Watch elsewhere.
//
// # Semantics
//
// networking.k8s.io/v1, exactly: isolation per direction by policyTypes (defaulted as the
// API server does: Ingress always, Egress when there are egress rules; rules of a
// direction not listed are ignored); allow rules form a union; podSelector selects in the
// policy's namespace, namespaceSelector in the namespaces it matches, both in one peer
// are AND and separate peers OR; matchLabels and matchExpressions through
// metav1.LabelSelectorAsSelector; ipBlock with its exceptions subtracted; ports by
// number, range (endPort) and protocol (TCP by default), and by name, resolved per
// destination pod from its containers' ports. Host-network pods (their address is the
// node's) and terminated pods are never selected; pods are selected before they have an
// address, which comes from status.podIPs (the node's agent allocates it during the
// pod's CNI ADD; kubelet reports it once the sandbox runs). A named port in an egress rule resolves on the
// destination pod whatever the peer that matches it (a podSelector, a namespaceSelector,
// an ipBlock with or without except, or no peers at all); an address that is not a
// selectable pod has no container ports and matches no named port (as
// kube-network-policies reads it; see docs/networkpolicy-semantics.md).
//
// # Model
//
// Selectors are interned: every policy and peer with the same namespace (or
// namespaceSelector) and podSelector shares one group, whose members are maintained
// incrementally. A pod change evaluates only the groups of its namespace and the groups
// whose namespaceSelector matches its namespace; a namespace label change only the groups
// whose namespaceSelector matched it before or matches it after. Package labelindex finds
// those by the labels a selector requires, without evaluating every namespaceSelector. A group is an
// applied-to set and, when a rule names it as a peer, an address set. Named ports split
// groups by the number their pods resolve a name to; a group counts, per named ports
// resolved over it, how many members give each number, so that a member's change
// compiles again the policies concerned only when a number appears or disappears. The ipBlock peers of an egress rule
// with named ports are one more group: the pods with an address in the blocks (together),
// whose address set holds only those addresses, split the same way.
//
// A node's share is never copied: a node holds references to the groups with rules that
// have members on it, and counts the address sets those rules reference. A thousand
// policies over the same pods are one group with a thousand rules, and each node refers
// to the group once. Snapshots are built from these references on demand. A share also
// lists every selectable pod scheduled on the node (with its UID), selected or not: a pod
// joins the list in the same batch, hence the same delta, as the rules and isolation that
// concern it, so an agent that waits for a new pod to be listed never enforces less than
// its policy.
//
// Every change is an exact transition of some node's share (a rule, set or isolation
// that appears, changes or disappears there). Transitions are recorded only for nodes
// that have subscribers, folded per object until the subscriber takes them, and turned
// into a Delta from the generation the subscriber has to the current one: a slow
// subscriber gets one larger delta, never a backlog. Address sets change by patches.
//
// # Concurrency
//
// Informer handlers only record the latest object per key and signal. One worker
// compiles the recorded changes in batches, under the write lock, after every informer
// has delivered its initial list (Ready). Subscribers build their deltas under the read
// lock. [Compile] runs the same model from scratch in one batch: the reference the
// incremental path is tested against.
//
// # Benchmark
//
// BenchmarkPolicyShapes compiles the two shapes Antrea publishes for its controller (see
// /work/shared/bench-shapes.md) from a fake clientset and compares with its figures:
//
//	go test -run '^$' -bench BenchmarkPolicyShapes -benchtime 1x ./go-controller/pkg/controller/policy
//	go test -run '^$' -bench BenchmarkPolicyShapes -benchtime 1x ./go-controller/pkg/controller/policy -policy.scale 0.1
package networkpolicy
