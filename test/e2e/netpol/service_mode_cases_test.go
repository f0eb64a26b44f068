package netpol_test

import (
	"strings"
	"testing"
)

// TestServiceModeCases checks, without a cluster, what the service mode leaves of the
// cases: no SCTP probe unless Services carry SCTP, every other probe kept, and a case
// left out only when one of its steps probes SCTP alone.
func TestServiceModeCases(t *testing.T) {
	cases, err := loadCases("cases")
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, c := range cases {
		got, ok := withoutSCTPProbes(c)
		if !ok {
			if serviceSCTP {
				t.Errorf("%s left out though Services carry SCTP", c.Name)
			}
			onlySCTP := false
			for _, st := range c.Steps {
				n := 0
				for _, p := range st.Expect.ports() {
					if !strings.HasSuffix(p, "/sctp") {
						n++
					}
				}
				onlySCTP = onlySCTP || n == 0
			}
			if !onlySCTP {
				t.Errorf("%s left out, but every step probes something other than SCTP", c.Name)
			}
			continue
		}
		kept++
		for i, st := range got.Steps {
			var want []string
			for _, p := range c.Steps[i].Expect.ports() {
				if serviceSCTP || !strings.HasSuffix(p, "/sctp") {
					want = append(want, p)
				}
			}
			if strings.Join(st.Expect.ports(), ",") != strings.Join(want, ",") {
				t.Errorf("%s step %d probes %v in service mode, want %v", c.Name, i+1, st.Expect.ports(), want)
			}
		}
	}
	t.Logf("service mode runs %d of %d cases", kept, len(cases))
}
