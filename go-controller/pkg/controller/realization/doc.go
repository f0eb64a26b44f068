// Package realization tells, for every NetworkPolicy, on how many of the nodes it
// concerns it is enforced, and records it on the policy: the annotation
// kovs.io/realization ("3/3 nodes, generation N") and, when the count becomes complete,
// an Event PolicyRealized.
//
// A node concerns a policy when the policy selects pods on it (scheduled there, not
// host-network, not finished). The policy is realized on the node when the node's agent
// has reported a generation at least as new as the last generation at which the node's
// share changed for the policy, and that share reflects the policy at all: every selected
// pod of the node is isolated in each direction the policy isolates, and every rule of the
// policy whose ports are all numbers is there (named-port rules are split per resolved
// number and exist only where the name resolves, so they are not required). The pods a
// policy selects are found in an index of the Pod informer by namespace and label
// (podLabelsIndex) when its podSelector requires a label value, so that a status costs
// the policy's own pods, not its namespace's; a podSelector that requires no value lists
// the namespace.
//
// What changed when, per node, is derived from the shares themselves: the Tracker
// subscribes to every node's share (as an agent does, through the same source, so its
// generations are the ones agents report) and records the generation at which each rule,
// set and pod isolation last changed. A policy's generation on a node is the newest of
// those of its rules, of the sets they reference, of the isolation of its selected pods,
// and of the last removal of one of its rules. The tracker patches the nodes' address
// sets through a policy.SetMemo, so that a set all nodes hold is one list in its records,
// shared with the transition gate's, not a copy per node.
//
// One gap remains that only the compiler can close: between an update of a policy and the
// compiler batch that compiles it (usually milliseconds), the shares still show the
// previous version, so the status still describes that version. The compiler could
// report, per policy, the metadata.generation it compiled and the generation at which the
// policy last changed; the tracker would then need no shares of its own.
package realization
