package stream

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
)

// TokenReviewer authenticates ServiceAccount tokens with kube-apiserver's TokenReview API,
// for the controller's audience. Answers are cached by the token's SHA-256 for TTL
// (FailureTTL for refusals), so an agent's reconnects and reports cost about one review a
// minute (kube-apiserver caches its webhook token reviews for two).
type TokenReviewer struct {
	Reviews   authnclient.TokenReviewInterface
	Audiences []string
	// TTL and FailureTTL default to 1 min and 10 s.
	TTL, FailureTTL time.Duration
	// MaxEntries bounds the cache (default 4096).
	MaxEntries int

	now   func() time.Time
	mu    sync.Mutex
	cache map[[sha256.Size]byte]reviewEntry
}

type reviewEntry struct {
	id      Identity
	err     error
	expires time.Time
}

// NewTokenReviewer returns a TokenReviewer for tokens of audience TokenAudience.
func NewTokenReviewer(reviews authnclient.TokenReviewInterface) *TokenReviewer {
	return &TokenReviewer{Reviews: reviews, Audiences: []string{TokenAudience}}
}

// Authenticate implements Authenticator.
func (r *TokenReviewer) Authenticate(ctx context.Context, token string) (Identity, error) {
	key := sha256.Sum256([]byte(token))
	if e, ok := r.cached(key); ok {
		return e.id, e.err
	}
	review, err := r.Reviews.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: r.Audiences}},
		metav1.CreateOptions{})
	if err != nil {
		return Identity{}, fmt.Errorf("token review: %w", err)
	}
	id, err := identityOf(review.Status)
	ttl := orDefault(r.TTL, time.Minute)
	if err != nil {
		ttl = orDefault(r.FailureTTL, 10*time.Second)
	}
	r.store(key, reviewEntry{id: id, err: err, expires: r.clock().Add(ttl)})
	return id, err
}

func identityOf(st authnv1.TokenReviewStatus) (Identity, error) {
	if !st.Authenticated {
		reason := st.Error
		if reason == "" {
			reason = "token not authenticated"
		}
		return Identity{}, fmt.Errorf("%s: %w", reason, ErrUnauthenticated)
	}
	id := Identity{User: st.User.Username}
	if nodes := st.User.Extra[NodeNameExtra]; len(nodes) == 1 {
		id.Node = nodes[0]
	}
	return id, nil
}

func (r *TokenReviewer) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

func (r *TokenReviewer) cached(key [sha256.Size]byte) (reviewEntry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.cache[key]
	if !ok || r.clock().After(e.expires) {
		return reviewEntry{}, false
	}
	return e, true
}

func (r *TokenReviewer) store(key [sha256.Size]byte, e reviewEntry) {
	max := r.MaxEntries
	if max == 0 {
		max = 4096
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cache == nil {
		r.cache = map[[sha256.Size]byte]reviewEntry{}
	}
	if len(r.cache) >= max {
		now := r.clock()
		for k, old := range r.cache {
			if now.After(old.expires) {
				delete(r.cache, k)
			}
		}
		if len(r.cache) >= max {
			clear(r.cache)
		}
	}
	r.cache[key] = e
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
