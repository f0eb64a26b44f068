package stream

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	k8stesting "k8s.io/client-go/testing"
)

// testToken is a JWT shaped like a ServiceAccount token for aud, expiring at exp, whose
// subject names it (the fake TokenReview tells tokens apart by it); the signature is
// random bytes, which only kube-apiserver could check.
func testToken(subject string, aud []string, exp time.Time) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	sig := make([]byte, 256)
	_, _ = rand.Read(sig)
	return enc(map[string]string{"alg": "RS256", "kid": "test"}) + "." +
		enc(map[string]any{"iss": "https://kubernetes.default.svc", "sub": subject, "aud": aud, "exp": exp.Unix(), "iat": exp.Add(-time.Hour).Unix()}) +
		"." + base64.RawURLEncoding.EncodeToString(sig)
}

func subjectOf(token string) string {
	var claims struct {
		Sub string `json:"sub"`
	}
	parts := splitToken(token)
	if len(parts) == 3 {
		_ = decodePart(parts[1], &claims)
	}
	return claims.Sub
}

func splitToken(t string) []string {
	var parts []string
	start := 0
	for i := range len(t) {
		if t[i] == '.' {
			parts = append(parts, t[start:i])
			start = i + 1
		}
	}
	return append(parts, t[start:])
}

// fakeReviews answers TokenReviews as kube-apiserver does: for subject "good" a node-bound
// token of the agents' ServiceAccount valid for the controller's audience, for
// "other-audience" one valid for another audience only, an API failure for "error", and
// a refusal for anything else. It counts the reviews it answers.
func fakeReviews(t *testing.T, calls *atomic.Int64) *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		calls.Add(1)
		review := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		if !slices.Equal(review.Spec.Audiences, []string{TokenAudience}) {
			t.Errorf("review for audiences %q, want only %q", review.Spec.Audiences, TokenAudience)
		}
		out := review.DeepCopy()
		agent := authnv1.UserInfo{Username: agentUser, Extra: map[string]authnv1.ExtraValue{
			NodeNameExtra: {"node1"}, "authentication.kubernetes.io/node-uid": {"uid-1"}}}
		switch subjectOf(review.Spec.Token) {
		case "good":
			out.Status = authnv1.TokenReviewStatus{Authenticated: true, Audiences: []string{TokenAudience}, User: agent}
		case "other-audience":
			out.Status = authnv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"https://kubernetes.default.svc"}, User: agent}
		case "error":
			return true, nil, errors.New("apiserver unavailable")
		default:
			out.Status = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, out, nil
	})
	return c
}

func newTestReviewer(t *testing.T, calls *atomic.Int64) *TokenReviewer {
	return NewTokenReviewer(fakeReviews(t, calls).AuthenticationV1().TokenReviews())
}

var inAnHour = time.Now().Add(time.Hour)

func TestTokenReviewerIdentifiesNodeBoundTokens(t *testing.T) {
	var calls atomic.Int64
	r := newTestReviewer(t, &calls)
	now := time.Now()
	r.now = func() time.Time { return now }
	ctx := context.Background()
	good := testToken("good", []string{TokenAudience}, inAnHour)

	id, err := r.Authenticate(ctx, good)
	if err != nil || id != (Identity{User: agentUser, Node: "node1"}) {
		t.Fatalf("good token: %+v, %v", id, err)
	}
	if _, err := r.Authenticate(ctx, good); err != nil || calls.Load() != 1 {
		t.Errorf("second use within the TTL: %v after %d reviews, want one review", err, calls.Load())
	}
	now = now.Add(DefaultReviewTTL + time.Second)
	if _, err := r.Authenticate(ctx, good); err != nil || calls.Load() != 2 {
		t.Errorf("use after the TTL: %v after %d reviews, want a new review", err, calls.Load())
	}
	if _, err := r.Authenticate(ctx, testToken("forged", []string{TokenAudience}, inAnHour)); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("forged token: %v, want ErrUnauthenticated", err)
	}
	if _, err := r.Authenticate(ctx, testToken("error", []string{TokenAudience}, inAnHour)); err == nil || errors.Is(err, ErrUnauthenticated) {
		t.Errorf("failed review: %v, want an error that is not ErrUnauthenticated (retry, not refuse)", err)
	}
}

// TestJunkNeverReachesKubeAPIServer (issue 14): tokens that cannot be ServiceAccount
// tokens for the controller's audience are refused without a TokenReview; one kube-apiserver
// validates for another audience only is refused after it.
func TestJunkNeverReachesKubeAPIServer(t *testing.T) {
	var calls atomic.Int64
	r := newTestReviewer(t, &calls)
	ctx := context.Background()
	junk := map[string]string{
		"a word":               "junk",
		"empty":                "",
		"two parts":            "aGVsbG8.d29ybGQ",
		"not base64":           "!!!.???.***",
		"alg none":             base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`)) + ".e30.c2ln",
		"another audience":     testToken("good", []string{"https://kubernetes.default.svc"}, inAnHour),
		"expired":              testToken("good", []string{TokenAudience}, time.Now().Add(-time.Hour)),
		"huge":                 string(make([]byte, 20000)),
		"claims not an object": base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256"}`)) + ".WzFd." + base64.RawURLEncoding.EncodeToString(make([]byte, 64)),
	}
	for name, token := range junk {
		if _, err := r.Authenticate(ctx, token); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s: %v, want ErrUnauthenticated", name, err)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("%d TokenReviews for junk, want none", n)
	}
	if _, err := r.Authenticate(ctx, testToken("other-audience", []string{TokenAudience}, inAnHour)); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("a token kube-apiserver validated for another audience only: %v, want ErrUnauthenticated", err)
	}
}

// TestRefusalsNeverEvictAgents (issue 14): a flood of well-formed forged tokens fills the
// refusal cache, which evicts its oldest entries one by one; the valid agent's entry is in
// a cache of its own and keeps being served without a new review.
func TestRefusalsNeverEvictAgents(t *testing.T) {
	var calls atomic.Int64
	r := newTestReviewer(t, &calls)
	r.MaxEntries = 8
	ctx := context.Background()
	good := testToken("good", []string{TokenAudience}, inAnHour)
	if _, err := r.Authenticate(ctx, good); err != nil {
		t.Fatal(err)
	}
	var forged []string
	for i := range 100 {
		forged = append(forged, testToken(fmt.Sprint("forged-", i), []string{TokenAudience}, inAnHour))
		_, _ = r.Authenticate(ctx, forged[i])
	}
	before := calls.Load()
	if _, err := r.Authenticate(ctx, good); err != nil || calls.Load() != before {
		t.Errorf("the agent's token after the flood: %v, %d new reviews; want it served from its cache", err, calls.Load()-before)
	}
	if n := r.refused.len(); n != 8 {
		t.Errorf("the refusal cache holds %d entries, want its bound, 8", n)
	}
	if _, err := r.Authenticate(ctx, forged[99]); !errors.Is(err, ErrUnauthenticated) || calls.Load() != before {
		t.Errorf("the newest refusal was not kept: %v, %d new reviews", err, calls.Load()-before)
	}
	if _, _ = r.Authenticate(ctx, forged[0]); calls.Load() != before+1 {
		t.Errorf("the oldest refusal was not the one evicted")
	}
}

// TestTokenReviewsInFlightAreBounded (issue 14): however many requests come at once, at
// most MaxInFlight reviews run; the rest wait BusyWait for a slot, then get ErrBusy (the
// server's 503), and requests with one token share one review.
func TestTokenReviewsInFlightAreBounded(t *testing.T) {
	var calls, running, peak atomic.Int64
	release := make(chan struct{})
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		calls.Add(1)
		n := running.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		<-release
		running.Add(-1)
		out := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview).DeepCopy()
		out.Status = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
		return true, out, nil
	})
	r := NewTokenReviewer(c.AuthenticationV1().TokenReviews())
	r.MaxInFlight, r.BusyWait = 3, 200*time.Millisecond
	var wg sync.WaitGroup
	var busy atomic.Int64
	shared := testToken("shared", []string{TokenAudience}, inAnHour)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			token := testToken(fmt.Sprint("flood-", i), []string{TokenAudience}, inAnHour)
			if i%10 == 0 {
				token = shared
			}
			if _, err := r.Authenticate(context.Background(), token); errors.Is(err, ErrBusy) {
				busy.Add(1)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	close(release)
	wg.Wait()
	if p := peak.Load(); p > 3 {
		t.Errorf("%d reviews ran at once, want at most 3", p)
	}
	if busy.Load() == 0 {
		t.Errorf("no request was told to retry later (ErrBusy) while every slot was taken")
	}
	if calls.Load() > 3+1 {
		t.Errorf("%d reviews for 50 requests with the slots held, want at most the 3 slots and one shared retry", calls.Load())
	}
}

// TestDefaultSlotsReachTheRate (issue 17): by default as many reviews run at once as
// the reviewer's client may make a second (DefaultReviewsInFlight, the default
// --token-review-qps), so agents connecting together are let in at that rate while
// kube-apiserver answers within a second. With 4 slots, the first 5,000-node run let
// them in at about 4 a second and turned the rest away with ErrBusy.
func TestDefaultSlotsReachTheRate(t *testing.T) {
	reviews := &heldReviews{reached: make(chan struct{}), release: make(chan struct{}), at: DefaultReviewsInFlight}
	r := NewTokenReviewer(reviews)
	r.BusyWait = time.Minute // only the slots decide here, not the wait for one
	var wg sync.WaitGroup
	for i := range DefaultReviewsInFlight {
		wg.Go(func() {
			_, _ = r.Authenticate(context.Background(), testToken(fmt.Sprint("agent-", i), []string{TokenAudience}, inAnHour))
		})
	}
	select {
	case <-reviews.reached:
	case <-time.After(10 * time.Second):
		t.Errorf("%d agents' reviews ran at once by default, want %d (the default rate a second)", reviews.peak.Load(), DefaultReviewsInFlight)
	}
	close(reviews.release)
	wg.Wait()
	if DefaultReviewsInFlight < 20 {
		t.Errorf("DefaultReviewsInFlight %d is below the default --token-review-qps of 20", DefaultReviewsInFlight)
	}
}

// heldReviews is a TokenReview client whose calls all wait for release, counting how
// many wait at once (the fake clientset runs one reactor at a time, so it cannot).
type heldReviews struct {
	authnclient.TokenReviewInterface
	running, peak atomic.Int64
	at            int64
	reached       chan struct{}
	release       chan struct{}
}

func (h *heldReviews) Create(_ context.Context, tr *authnv1.TokenReview, _ metav1.CreateOptions) (*authnv1.TokenReview, error) {
	n := h.running.Add(1)
	for p := h.peak.Load(); n > p && !h.peak.CompareAndSwap(p, n); p = h.peak.Load() {
	}
	if n == h.at {
		close(h.reached)
	}
	<-h.release
	out := tr.DeepCopy()
	out.Status = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
	return out, nil
}

// TestReviewsScaleWithNodesNotRequests (issue 17): in a 5,000-node cluster every agent's
// token stays cached for the TTL, so the agents' reports cost one review per agent per
// TTL. At a 1-minute TTL and 4,096 entries, 5,000 agents needed 83 reviews a second,
// against the 20 the reviewer's client may make.
func TestReviewsScaleWithNodesNotRequests(t *testing.T) {
	var calls atomic.Int64
	r := newTestReviewer(t, &calls)
	now := time.Now()
	r.now = func() time.Time { return now }
	ctx := context.Background()
	tokens := make([]string, 5000)
	for i := range tokens {
		tokens[i] = testToken("good", []string{TokenAudience}, now.Add(time.Hour))
		if _, err := r.Authenticate(ctx, tokens[i]); err != nil {
			t.Fatalf("agent %d: %v", i, err)
		}
	}
	now = now.Add(4 * time.Minute)
	before := calls.Load()
	for i, token := range tokens {
		if _, err := r.Authenticate(ctx, token); err != nil {
			t.Fatalf("agent %d, 4 minutes later: %v", i, err)
		}
	}
	if n := calls.Load() - before; n != 0 {
		t.Errorf("5,000 agents reporting again 4 minutes later cost %d new reviews, want 0", n)
	}
}

// revocableReviews answers like fakeReviews, and refuses every token once revoked is set.
func revocableReviews(t *testing.T, calls *atomic.Int64, revoked *atomic.Bool) *TokenReviewer {
	c := fakeReviews(t, calls)
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if !revoked.Load() {
			return false, nil, nil
		}
		calls.Add(1)
		out := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview).DeepCopy()
		out.Status = authnv1.TokenReviewStatus{Error: "the Node this token is bound to was deleted"}
		return true, out, nil
	})
	return NewTokenReviewer(c.AuthenticationV1().TokenReviews())
}

// Reauthenticate asks again whatever is cached, and a refusal ends the cached acceptance.
func TestReauthenticateSkipsTheCache(t *testing.T) {
	var calls atomic.Int64
	var revoked atomic.Bool
	r := revocableReviews(t, &calls, &revoked)
	ctx := context.Background()
	token := testToken("good", []string{TokenAudience}, inAnHour)
	if _, err := r.Authenticate(ctx, token); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reauthenticate(ctx, token); err != nil || calls.Load() != 2 {
		t.Errorf("Reauthenticate: %v after %d reviews, want a second review", err, calls.Load())
	}
	revoked.Store(true)
	if _, err := r.Authenticate(ctx, token); err != nil {
		t.Errorf("within the TTL the cached acceptance stands: %v", err)
	}
	if _, err := r.Reauthenticate(ctx, token); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("Reauthenticate after the revocation: %v, want ErrUnauthenticated", err)
	}
	before := calls.Load()
	if _, err := r.Authenticate(ctx, token); !errors.Is(err, ErrUnauthenticated) || calls.Load() != before {
		t.Errorf("after the refusal: %v with %d new reviews, want the cached refusal", err, calls.Load()-before)
	}
}

// An open stream ends within ReauthInterval when kube-apiserver stops accepting its
// token, although the reviewer would trust its cached answer for minutes more.
func TestStreamEndsWhenKubeAPIServerRevokesItsToken(t *testing.T) {
	var calls atomic.Int64
	var revoked atomic.Bool
	src := newFakeSource()
	ts := startServer(t, ServerConfig{Source: src, Authenticator: revocableReviews(t, &calls, &revoked),
		Authorizer: AgentAuthorizer{User: agentUser}, ReauthInterval: 20 * time.Millisecond}, newTestPKI(t))
	sink := newRecordingSink()
	runClient(t, ts, "node1", testToken("good", []string{TokenAudience}, inAnHour), sink)
	sink.waitShare(t, src.share("node1"))
	revoked.Store(true)
	src.waitUnsubscribed(t, "node1")
}
