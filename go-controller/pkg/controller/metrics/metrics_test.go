package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/realization"
)

type fixedSummary realization.Summary

func (f fixedSummary) Summary() realization.Summary { return realization.Summary(f) }

func TestRealizationMetrics(t *testing.T) {
	c := RealizationCollector{Source: fixedSummary{
		Policies: map[string]realization.Status{"x/web": {Realized: 2, Concerned: 3, Generation: 7}},
		Complete: 4, Incomplete: 1,
	}}
	want := `
# HELP kovs_networkpolicy_concerned_nodes Nodes with pods the NetworkPolicy selects.
# TYPE kovs_networkpolicy_concerned_nodes gauge
kovs_networkpolicy_concerned_nodes{name="web",namespace="x"} 3
# HELP kovs_networkpolicy_realized_nodes Nodes that enforce the NetworkPolicy's current generation.
# TYPE kovs_networkpolicy_realized_nodes gauge
kovs_networkpolicy_realized_nodes{name="web",namespace="x"} 2
# HELP kovs_networkpolicies NetworkPolicies by realization state (complete: enforced on every node it concerns).
# TYPE kovs_networkpolicies gauge
kovs_networkpolicies{state="complete"} 4
kovs_networkpolicies{state="incomplete"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
