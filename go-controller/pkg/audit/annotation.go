// Package audit is kovs's policy audit log: which verdicts an operator asked to log (the
// kovs.io/audit-log annotation on a Namespace or a ClusterNetworkPolicy), the JSON line
// kovs-agent writes for each logged decision, the writer that collapses repeated denies and
// bounds the file, and the parser of the packet-ins that carry the decisions from br-int.
// docs/audit.md is the operator's page.
package audit

import (
	"fmt"
	"slices"
	"strings"
)

// Annotation turns logging on for the NetworkPolicies of a Namespace (on the Namespace)
// or for a ClusterNetworkPolicy (on it): a comma-separated list of the verdicts to log,
// e.g. "allow,deny".
const Annotation = "kovs.io/audit-log"

// Verdict is what a logged rule decided.
type Verdict string

// The verdicts. Pass is ClusterNetworkPolicy's: the Admin tier deferred to NetworkPolicy,
// or the Baseline tier to the default allow.
const (
	Allow Verdict = "allow"
	Deny  Verdict = "deny"
	Pass  Verdict = "pass"
)

// Code is the verdict's number in a flow's controller(userdata=...) action.
func (v Verdict) Code() byte {
	switch v {
	case Allow:
		return 1
	case Deny:
		return 2
	case Pass:
		return 3
	}
	return 0
}

// VerdictOfCode is the verdict a userdata byte names ("" for none).
func VerdictOfCode(c byte) Verdict {
	for _, v := range []Verdict{Allow, Deny, Pass} {
		if v.Code() == c {
			return v
		}
	}
	return ""
}

// Verdicts is a set of verdicts to log; the zero value logs nothing.
type Verdicts uint8

// Has reports whether the set holds v.
func (s Verdicts) Has(v Verdict) bool { return v.Code() != 0 && s&(1<<v.Code()) != 0 }

// With is the set with v added.
func (s Verdicts) With(v Verdict) Verdicts { return s | 1<<v.Code() }

// String lists the set as the annotation writes it.
func (s Verdicts) String() string {
	var out []string
	for _, v := range []Verdict{Allow, Deny, Pass} {
		if s.Has(v) {
			out = append(out, string(v))
		}
	}
	return strings.Join(out, ",")
}

// NamespaceVerdicts are what a Namespace's annotation may name: NetworkPolicy allows, and
// denies by default.
var NamespaceVerdicts = []Verdict{Allow, Deny}

// ClusterPolicyVerdicts are what a ClusterNetworkPolicy's annotation may name.
var ClusterPolicyVerdicts = []Verdict{Allow, Deny, Pass}

// Parse reads an annotation's value: verdicts from accepted, separated by commas (spaces
// around them are ignored). A malformed value is an error that names the value and the
// accepted verdicts; the caller logs nothing for the object then.
func Parse(value string, accepted []Verdict) (Verdicts, error) {
	var s Verdicts
	for _, part := range strings.Split(value, ",") {
		v := Verdict(strings.ToLower(strings.TrimSpace(part)))
		if !slices.Contains(accepted, v) {
			return 0, fmt.Errorf("%s=%q: %q is not a verdict; give a comma-separated list of %s", Annotation, value,
				strings.TrimSpace(part), acceptedList(accepted))
		}
		s = s.With(v)
	}
	return s, nil
}

func acceptedList(accepted []Verdict) string {
	out := make([]string, len(accepted))
	for i, v := range accepted {
		out[i] = string(v)
	}
	return strings.Join(out, ", ")
}
