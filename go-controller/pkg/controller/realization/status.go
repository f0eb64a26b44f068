package realization

import (
	"fmt"
)

// AnnotationKey is the NetworkPolicy annotation that holds its Status.
const AnnotationKey = "kovs.io/realization"

// ReasonRealized is the reason of the Event recorded when a policy is enforced on every
// node it concerns.
const ReasonRealized = "PolicyRealized"

// Status is how far one NetworkPolicy is enforced.
type Status struct {
	// Realized counts the concerned nodes that enforce the policy; Concerned the nodes
	// with pods the policy selects.
	Realized, Concerned int
	// Generation is the generation every concerned node must have realized: the newest at
	// which the policy changed on one of them.
	Generation uint64
}

// Complete reports whether every concerned node enforces the policy.
func (s Status) Complete() bool { return s.Realized == s.Concerned }

// String is the annotation's value: "3/3 nodes, generation 17".
func (s Status) String() string {
	return fmt.Sprintf("%d/%d nodes, generation %d", s.Realized, s.Concerned, s.Generation)
}

// ParseStatus reads an annotation value written by String.
func ParseStatus(v string) (Status, error) {
	var s Status
	if _, err := fmt.Sscanf(v, "%d/%d nodes, generation %d", &s.Realized, &s.Concerned, &s.Generation); err != nil {
		return Status{}, fmt.Errorf("realization status %q: %w", v, err)
	}
	return s, nil
}

// Summary is the realization of every policy, for metrics: the per-policy statuses and
// the number of policies complete and incomplete.
type Summary struct {
	Policies   map[string]Status // by namespace/name
	Complete   int
	Incomplete int
}
