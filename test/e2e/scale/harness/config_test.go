package harness

import (
	"testing"
	"time"
)

// TestLeaseRenewalsOffUnlessAsked: the sizes renew no Lease; KOVS_SCALE_LEASE_RENEW turns
// kubelet's renewals back on, and a negative interval is refused.
func TestLeaseRenewalsOffUnlessAsked(t *testing.T) {
	if FullSize().LeaseRenewInterval != 0 || TestSize().LeaseRenewInterval != 0 {
		t.Errorf("a size renews Leases by default")
	}
	t.Setenv("KOVS_SCALE_LEASE_RENEW", "10s")
	c, err := TestSize().FromEnv()
	if err != nil || c.LeaseRenewInterval != 10*time.Second {
		t.Errorf("KOVS_SCALE_LEASE_RENEW=10s gave %s, %v; want 10s", c.LeaseRenewInterval, err)
	}
	t.Setenv("KOVS_SCALE_LEASE_RENEW", "-1s")
	if _, err := TestSize().FromEnv(); err == nil {
		t.Errorf("a negative renewal interval was accepted")
	}
}

// TestChurnStepsFromEnv: KOVS_SCALE_CHURN_STEPS replaces the steps (empty: none); a
// factor that is not a positive number is refused with the variable named.
func TestChurnStepsFromEnv(t *testing.T) {
	t.Setenv("KOVS_SCALE_CHURN_STEPS", "0.5, 1,3")
	c, err := TestSize().FromEnv()
	if err != nil || len(c.ChurnSteps) != 3 || c.ChurnSteps[0] != 0.5 || c.ChurnSteps[2] != 3 {
		t.Errorf("0.5, 1,3 gave %v, %v", c.ChurnSteps, err)
	}
	t.Setenv("KOVS_SCALE_CHURN_STEPS", "")
	if c, err := TestSize().FromEnv(); err != nil || len(c.ChurnSteps) != 0 {
		t.Errorf("empty gave %v, %v; want no steps", c.ChurnSteps, err)
	}
	for _, bad := range []string{"fast", "0", "-1"} {
		t.Setenv("KOVS_SCALE_CHURN_STEPS", bad)
		if _, err := TestSize().FromEnv(); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}
