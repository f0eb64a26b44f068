package stream

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeReviews answers TokenReviews as kube-apiserver does for a node-bound token of the
// agents' ServiceAccount ("good"), and refuses any other token.
func fakeReviews(t *testing.T, calls *int) *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		*calls++
		review := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		if !slices.Equal(review.Spec.Audiences, []string{TokenAudience}) {
			t.Errorf("review for audiences %q, want only %q", review.Spec.Audiences, TokenAudience)
		}
		out := review.DeepCopy()
		switch review.Spec.Token {
		case "good":
			out.Status = authnv1.TokenReviewStatus{Authenticated: true, Audiences: []string{TokenAudience},
				User: authnv1.UserInfo{Username: agentUser, Extra: map[string]authnv1.ExtraValue{
					NodeNameExtra: {"node1"}, "authentication.kubernetes.io/node-uid": {"uid-1"}}}}
		case "error":
			return true, nil, errors.New("apiserver unavailable")
		default:
			out.Status = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, out, nil
	})
	return c
}

func TestTokenReviewerIdentifiesNodeBoundTokens(t *testing.T) {
	calls := 0
	r := NewTokenReviewer(fakeReviews(t, &calls).AuthenticationV1().TokenReviews())
	now := time.Now()
	r.now = func() time.Time { return now }
	ctx := context.Background()

	id, err := r.Authenticate(ctx, "good")
	if err != nil || id != (Identity{User: agentUser, Node: "node1"}) {
		t.Fatalf("good token: %+v, %v", id, err)
	}
	if _, err := r.Authenticate(ctx, "good"); err != nil || calls != 1 {
		t.Errorf("second use within the TTL: %v after %d reviews, want one review", err, calls)
	}
	now = now.Add(61 * time.Second)
	if _, err := r.Authenticate(ctx, "good"); err != nil || calls != 2 {
		t.Errorf("use after the TTL: %v after %d reviews, want a new review", err, calls)
	}

	if _, err := r.Authenticate(ctx, "forged"); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("forged token: %v, want ErrUnauthenticated", err)
	}
	if _, err := r.Authenticate(ctx, "error"); err == nil || errors.Is(err, ErrUnauthenticated) {
		t.Errorf("failed review: %v, want an error that is not ErrUnauthenticated (retry, not refuse)", err)
	}
}

func TestTokenReviewerCacheIsBounded(t *testing.T) {
	calls := 0
	r := NewTokenReviewer(fakeReviews(t, &calls).AuthenticationV1().TokenReviews())
	r.MaxEntries = 3
	for _, tok := range []string{"a", "b", "c", "d", "e"} {
		_, _ = r.Authenticate(context.Background(), tok)
	}
	if n := len(r.cache); n > 3 {
		t.Errorf("%d cached reviews, want at most 3", n)
	}
}
