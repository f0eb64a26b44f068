package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// retryWrite runs write until it succeeds, fails for good or two minutes pass. What a
// loaded kube-apiserver answers for a while is retried: throttling, timeouts, internal
// errors, broken connections, and Forbidden while kube-controller-manager has not yet
// created a new namespace's default ServiceAccount.
func retryWrite(ctx context.Context, write func() error) error {
	deadline := time.Now().Add(2 * time.Minute)
	wait := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err := write()
		if attempt > 0 && apierrors.IsAlreadyExists(err) {
			return nil // an earlier attempt that timed out did create it
		}
		if err == nil || !transient(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

func transient(err error) bool {
	var netErr net.Error
	return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsForbidden(err) ||
		errors.As(err, &netErr)
}
