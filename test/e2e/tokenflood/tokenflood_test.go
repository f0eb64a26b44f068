// Package tokenflood_test floods kovs-controller's policy stream port with junk
// credentials in a real sandbox (2 nodes, a real kube-apiserver, etcd and
// kovs-controller), while pods are created and the controller renews its leader Lease:
// the attack of docs/security.md "A TokenReview flood on the policy stream port".
//
// Each run has two phases, the same but for the flood: podsPerPhase pods are created and
// a NetworkPolicy over them; each pod's time from its Create call to its addresses in
// status.podIPs (its node's agent allocates them) and the Lease's renewals are recorded. In the flood
// phase floodRequests junk requests, each on its own connection from node1 (to the
// node's 127.0.0.1:9443, as an agent reaches the controller), are released at once: a
// quarter with no token, a quarter with tokens that cannot be ServiceAccount tokens for
// the stream (not JWTs, unsigned, another audience), a quarter with an agent's token
// re-signed with random bytes (the controller verifies it with the issuer's key), a
// quarter the same under a key ID the issuer does not publish (which only kube-apiserver
// can refuse), every token distinct.
//
// The test asserts what the protection promises, never a latency: every junk request is
// refused; only the tokens of unknown keys cost TokenReviews, and no more than the
// controller's TokenReview rate limit allows; the controller verified the agents' tokens
// and refused the re-signed ones itself; the agents' streams work (the flood phase's policy is
// realized on both nodes); every pod gets its addresses; leadership is never lost. The
// latencies are logged, and reported as ratios by BenchmarkTokenReviewFlood. Needs root;
// runs under `make e2e` (KOVS_E2E=1).
package tokenflood_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

const (
	// floodRequests junk requests are released at once.
	floodRequests = 2000
	// reviewQPS and reviewBurst are kovs-controller's TokenReview rate limit (the
	// defaults of --token-review-qps and --token-review-burst, which the sandbox keeps).
	reviewQPS   = 20
	reviewBurst = 40
	// agentReviews bounds the TokenReviews the agents' own tokens may cost during a
	// flood (each agent's token is reviewed about once a minute).
	agentReviews = 10
)

func TestTokenReviewFlood(t *testing.T) {
	env := framework.Require(t)
	s := framework.Up(t, env, "--nodes", "2")
	c := newCluster(t, s)
	base := c.run(t, "tf-baseline", 0)
	flood := c.run(t, "tf-flood", floodRequests)
	t.Logf("baseline %s", base)
	t.Logf("flood    %s", flood)
	t.Logf("allocation latency per pod, in creation order (one every %s): baseline %s; flood %s", podInterval, base.perPod(), flood.perPod())
	t.Logf("flood answers: %s", flood.flood)
	t.Logf("TokenReviews kube-apiserver served during the flood: %.0f (in %s)", flood.reviews, ms(flood.reviewWindow))
	checkRefused(t, *flood.flood)
	checkReviews(t, flood)
	checkLocalVerification(t, s, flood)
	checkLeadership(t, base, flood)
}

// checkLocalVerification checks, on kovs-controller's own counter, that it verified the
// agents' tokens itself and refused the re-signed ones itself (checkReviews shows they
// cost kube-apiserver nothing).
func checkLocalVerification(t *testing.T, s *framework.Sandbox, p phase) {
	t.Helper()
	count := func(how string) float64 {
		n, err := s.ControllerMetric(context.Background(), "kovs_controller_agent_authentications_total", map[string]string{"how": how})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	local, refused := count("local"), count("refused")
	t.Logf("kovs-controller's decisions: %.0f agent tokens verified, %.0f refused, %.0f asked of kube-apiserver", local, refused, count("review"))
	if local < 2 {
		t.Errorf("%.0f tokens verified by kovs-controller: the two agents' were not", local)
	}
	if resigned := float64(p.flood.codes[badSignature][http.StatusUnauthorized]); refused < resigned {
		t.Errorf("kovs-controller refused %.0f tokens itself, fewer than the %.0f re-signed ones refused", refused, resigned)
	}
}

// checkRefused checks that every junk request was answered and refused: 401, or 503 with
// Retry-After when the TokenReviews in flight stayed at their bound (only tokens that
// need a review can wait for one).
func checkRefused(t *testing.T, res floodResult) {
	t.Helper()
	if len(res.errs) > 0 {
		t.Errorf("%d of %d junk requests got no answer, first: %v", len(res.errs), floodRequests, res.errs[0])
	}
	for k, codes := range res.codes {
		for code, n := range codes {
			refused := code == http.StatusUnauthorized || (code == http.StatusServiceUnavailable && junkKind(k) == unknownKey)
			if !refused {
				t.Errorf("%d junk requests with %s were answered %d %s", n, junkKind(k), code, http.StatusText(code))
			}
		}
	}
	if res.busyWithoutRetryAfter > 0 {
		t.Errorf("%d junk requests were answered 503 without Retry-After", res.busyWithoutRetryAfter)
	}
}

// checkReviews checks what the flood cost kube-apiserver. Each token of an unknown key
// the controller refused with 401 took one TokenReview (every token is distinct); the
// other junk must take none, and all of it no more than the TokenReview rate limit allows.
func checkReviews(t *testing.T, p phase) {
	t.Helper()
	unknown := float64(p.flood.codes[unknownKey][http.StatusUnauthorized])
	if p.reviews < unknown {
		t.Errorf("%.0f TokenReviews for %.0f tokens of unknown keys refused: they were not all asked of kube-apiserver (is the test's junk right?)", p.reviews, unknown)
	}
	if p.reviews > unknown+agentReviews {
		t.Errorf("%.0f TokenReviews for %.0f tokens of unknown keys refused: junk the controller can refuse itself (no token, not a ServiceAccount token, a signature its issuer's key does not verify) reached kube-apiserver", p.reviews, unknown)
	}
	if limit := reviewBurst + reviewQPS*p.reviewWindow.Seconds() + agentReviews; p.reviews > limit {
		t.Errorf("%.0f TokenReviews in %s: more than the controller's limit allows (%d/s, burst %d: %.0f)", p.reviews, ms(p.reviewWindow), reviewQPS, reviewBurst, limit)
	}
}

// checkLeadership checks that the controller stayed the leader through both phases: one
// holder, and never longer than the lease's duration without a renewal.
func checkLeadership(t *testing.T, phases ...phase) {
	t.Helper()
	var holders []string
	for _, p := range phases {
		if p.lease.duration == 0 {
			t.Errorf("%s: the Lease %s/%s was never seen", p.name, leaseNamespace, leaseName)
			continue
		}
		if p.lease.gap >= p.lease.duration {
			t.Errorf("%s: the Lease went %s without a renewal: longer than its duration, %s", p.name, ms(p.lease.gap), p.lease.duration)
		}
		for _, h := range p.lease.holders {
			if !slices.Contains(holders, h) {
				holders = append(holders, h)
			}
		}
	}
	if len(holders) != 1 {
		t.Errorf("the Lease's holders: %q, want one", holders)
	}
}

// BenchmarkTokenReviewFlood measures what the flood of TestTokenReviewFlood costs the
// controller's other work, as ratios flood/baseline in the same run: allocation latency
// (pod Create to kovs.io/pod-network) p50 and p99 over the pods of every iteration, and
// the longest time without a Lease renewal. It also reports the TokenReviews per flood.
// One iteration (-benchtime 1x, as make bench runs it) is the two phases, about 25 s;
// ns/op says little.
func BenchmarkTokenReviewFlood(b *testing.B) {
	env := framework.Require(b)
	s := framework.Up(b, env, "--nodes", "2")
	c := newCluster(b, s)
	var base, flood phase
	i := 0
	for b.Loop() {
		base = merge(base, c.run(b, fmt.Sprintf("tf-baseline-%d", i), 0))
		flood = merge(flood, c.run(b, fmt.Sprintf("tf-flood-%d", i), floodRequests))
		b.Logf("flood %d answers: %s", i, flood.flood)
		i++
	}
	b.Logf("baseline %s", base)
	b.Logf("flood    %s", flood)
	ratio := func(f, b time.Duration) float64 { return float64(f) / float64(max(b, time.Microsecond)) }
	b.ReportMetric(ratio(percentile(flood.alloc, 50), percentile(base.alloc, 50)), "alloc-p50-flood/base")
	b.ReportMetric(ratio(percentile(flood.alloc, 99), percentile(base.alloc, 99)), "alloc-p99-flood/base")
	b.ReportMetric(ratio(flood.lease.gap, base.lease.gap), "renew-gap-flood/base")
	b.ReportMetric(flood.reviews/float64(i), "tokenreviews/flood")
}

// merge adds q's measurements to p's: the allocations pooled, the longest Lease gap, the
// TokenReviews summed.
func merge(p, q phase) phase {
	if p.name == "" {
		return q
	}
	p.alloc = append(p.alloc, q.alloc...)
	slices.Sort(p.alloc)
	p.lease.gap = max(p.lease.gap, q.lease.gap)
	p.lease.renewals += q.lease.renewals
	p.elapsed += q.elapsed
	p.reviews += q.reviews
	p.flood = q.flood
	return p
}
