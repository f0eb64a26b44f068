// Package bandwidth reads a pod's bandwidth limits from the annotations Kubernetes
// defines for them, `kubernetes.io/ingress-bandwidth` (traffic to the pod) and
// `kubernetes.io/egress-bandwidth` (traffic from the pod): resource quantities in bits per
// second ("10M" is 10,000,000 bit/s, "10Mi" 10,485,760), as kubelet and the reference
// bandwidth CNI plugin read them. Pure: no I/O.
package bandwidth

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
)

// The annotations, as Kubernetes names them.
const (
	IngressAnnotation = "kubernetes.io/ingress-bandwidth"
	EgressAnnotation  = "kubernetes.io/egress-bandwidth"
)

// The accepted range, in bit/s: the reference bandwidth plugin's (it refuses rates below
// 1 kbit/s, which OVS cannot express, and above 32 Gbit/s).
const (
	MinRate uint64 = 1_000
	MaxRate uint64 = 32_000_000_000
)

// ErrInvalid marks an annotation value that is no usable rate.
var ErrInvalid = errors.New("invalid bandwidth annotation")

// Limits are a pod's rates in bit/s per direction; 0 is no limit.
type Limits struct {
	Ingress uint64 // to the pod
	Egress  uint64 // from the pod
}

// None reports whether no direction is limited.
func (l Limits) None() bool { return l.Ingress == 0 && l.Egress == 0 }

func (l Limits) String() string {
	return fmt.Sprintf("ingress %s, egress %s", rateString(l.Ingress), rateString(l.Egress))
}

func rateString(r uint64) string {
	if r == 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%d bit/s", r)
}

// FromAnnotations reads both directions. A direction whose annotation is missing has no
// limit; one whose value is unusable has no limit either, and its error (matching
// ErrInvalid, naming the annotation, the value and what is accepted) is returned, joined
// with the other direction's: the caller applies the limits it got and reports the rest.
func FromAnnotations(annotations map[string]string) (Limits, error) {
	var l Limits
	var errs []error
	for _, d := range []struct {
		key  string
		rate *uint64
	}{{IngressAnnotation, &l.Ingress}, {EgressAnnotation, &l.Egress}} {
		value, ok := annotations[d.key]
		if !ok {
			continue
		}
		r, err := ParseRate(value)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w %s=%q: %w", ErrInvalid, d.key, value, err))
			continue
		}
		*d.rate = r
	}
	return l, errors.Join(errs...)
}

// ParseRate reads one annotation value: a resource quantity between MinRate and MaxRate
// bit/s, rounded up to a whole bit/s.
func ParseRate(value string) (uint64, error) {
	q, err := resource.ParseQuantity(value)
	if err != nil {
		return 0, fmt.Errorf("not a quantity (want bits per second such as 10M, 500k or 1G): %w", err)
	}
	if q.Sign() <= 0 {
		return 0, fmt.Errorf("the rate must be positive, between 1k and 32G bit/s")
	}
	if q.Cmp(*resource.NewQuantity(int64(MinRate), resource.DecimalSI)) < 0 {
		return 0, fmt.Errorf("%s bit/s is below the smallest accepted rate, 1k bit/s", q.String())
	}
	if q.Cmp(*resource.NewQuantity(int64(MaxRate), resource.DecimalSI)) > 0 {
		return 0, fmt.Errorf("%s bit/s is above the largest accepted rate, 32G bit/s", q.String())
	}
	return uint64(q.Value()), nil
}
