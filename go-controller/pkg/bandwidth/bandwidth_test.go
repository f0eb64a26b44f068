package bandwidth

import (
	"errors"
	"strings"
	"testing"
)

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		err  string // a part of the error; "" for none
	}{
		{"10M", 10_000_000, ""},
		{"10Mi", 10_485_760, ""},
		{"500k", 500_000, ""},
		{"1k", 1_000, ""},
		{"1000", 1_000, ""},
		{"1.5M", 1_500_000, ""},
		{"32G", 32_000_000_000, ""},
		{"1e6", 1_000_000, ""},
		{"1001m", 2, "below"}, // 1.001 bit/s
		{"999", 0, "below"},
		{"33G", 0, "above"},
		{"1P", 0, "above"},
		{"0", 0, "positive"},
		{"-5M", 0, "positive"},
		{"10 M", 0, "not a quantity"},
		{"10Mbps", 0, "not a quantity"},
		{"", 0, "not a quantity"},
		{"fast", 0, "not a quantity"},
	} {
		got, err := ParseRate(tc.in)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("ParseRate(%q): %v", tc.in, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseRate(%q) = %d, %v; want an error saying %q", tc.in, got, err, tc.err)
		case tc.err == "" && got != tc.want:
			t.Errorf("ParseRate(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestFromAnnotations(t *testing.T) {
	l, err := FromAnnotations(map[string]string{IngressAnnotation: "10M", EgressAnnotation: "2G", "other": "x"})
	if err != nil || l != (Limits{Ingress: 10_000_000, Egress: 2_000_000_000}) {
		t.Fatalf("both set: %+v, %v", l, err)
	}
	if l, err := FromAnnotations(nil); err != nil || !l.None() {
		t.Fatalf("none: %+v, %v", l, err)
	}
	// A bad direction is not limited and is reported with its annotation, its value and
	// what is accepted; the other still applies.
	l, err = FromAnnotations(map[string]string{IngressAnnotation: "10Mbit", EgressAnnotation: "5M"})
	if l != (Limits{Egress: 5_000_000}) {
		t.Errorf("bad ingress: limits %+v, want egress only", l)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad ingress: error %v does not match ErrInvalid", err)
	}
	for _, want := range []string{IngressAnnotation, `"10Mbit"`, "10M, 500k or 1G"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	l, err = FromAnnotations(map[string]string{IngressAnnotation: "100T", EgressAnnotation: "1"})
	if !l.None() || err == nil || !strings.Contains(err.Error(), IngressAnnotation) || !strings.Contains(err.Error(), EgressAnnotation) {
		t.Errorf("both out of range: %+v, %v", l, err)
	}
}

// The annotations are written by whoever may create pods: any value is refused with an
// error or read as a rate inside the accepted range, never a panic.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"10M", "10Mi", "1k", "32G", "0", "-1", "1e3", "1.5M", "999m", "9223372036854775807", "1E18", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRate(s)
		if err == nil && (r < MinRate || r > MaxRate) {
			t.Fatalf("ParseRate(%q) = %d, outside [%d, %d]", s, r, MinRate, MaxRate)
		}
	})
}
