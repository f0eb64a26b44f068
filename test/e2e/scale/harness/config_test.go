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
