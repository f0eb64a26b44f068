package ovs

import (
	"strings"
	"testing"
)

func TestParseCoverageCounter(t *testing.T) {
	if n, err := ParseCoverageCounter("rconn_overflow", "238\n"); err != nil || n != 238 {
		t.Fatalf("ParseCoverageCounter(238) = %d, %v; want 238", n, err)
	}
	_, err := ParseCoverageCounter("rconn_overflow", "\"nosuch\": no such counter\n")
	if err == nil || !strings.Contains(err.Error(), "rconn_overflow") || !strings.Contains(err.Error(), "no such counter") {
		t.Fatalf("ParseCoverageCounter(not a number) error %v, want one naming the counter and what was printed", err)
	}
}
