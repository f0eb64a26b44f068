package plugin

import (
	"errors"
	"fmt"
	"testing"

	"github.com/vishvananda/netlink"
)

func TestRetryInterrupted(t *testing.T) {
	calls := 0
	got, err := retryInterrupted(func() (int, error) {
		calls++
		if calls < 3 {
			return 0, fmt.Errorf("dump: %w", netlink.ErrDumpInterrupted)
		}
		return 42, nil
	})
	if got != 42 || err != nil || calls != 3 {
		t.Errorf("retryInterrupted = %d, %v after %d calls; want 42 after 3", got, err, calls)
	}
	calls = 0
	_, err = retryInterrupted(func() (int, error) {
		calls++
		return 0, netlink.ErrDumpInterrupted
	})
	if !errors.Is(err, netlink.ErrDumpInterrupted) || calls != maxDumpAttempts {
		t.Errorf("always interrupted: %v after %d calls, want the error after %d", err, calls, maxDumpAttempts)
	}
	calls = 0
	other := errors.New("permission denied")
	if _, err := retryInterrupted(func() (int, error) { calls++; return 0, other }); err != other || calls != 1 {
		t.Errorf("other error: %v after %d calls, want it at once", err, calls)
	}
}
