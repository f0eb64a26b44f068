package stream

import (
	"container/list"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
)

// DefaultReviewTTL is how long a TokenReview that accepted a token is trusted: the
// interval at which an open stream's token is checked again (ServerConfig.ReauthInterval).
const DefaultReviewTTL = 5 * time.Minute

// DefaultReviewsInFlight is how many TokenReviews run at once by default
// (TokenReviewer.MaxInFlight): as many as the default --token-review-qps of 20, so the
// rate is reached while kube-apiserver answers within a second. The rate limit is what
// bounds kube-apiserver's load; the slots only bound what waits on it. With 4 slots and
// a loaded kube-apiserver answering in 1-2 s, 5,000 agents connecting at once were let in
// at about 4 a second, and their retries kept the stream's port busy for a quarter of an
// hour (docs/scale.md).
const DefaultReviewsInFlight = 20

// The bounds of the two answer caches (TokenReviewer.MaxEntries).
const (
	defaultValidEntries   = 16384
	defaultRefusedEntries = 4096
)

// ErrBusy is returned (wrapped) when every TokenReview slot stayed taken for BusyWait:
// the server answers 503, and the client retries.
var ErrBusy = errors.New("too many token reviews in flight")

// TokenReviewer authenticates ServiceAccount tokens with kube-apiserver's TokenReview API,
// for the controller's audience. Anyone who reaches the stream's port can make it
// authenticate, so it asks kube-apiserver as little as it can:
//
//   - what cannot be a ServiceAccount token for the audience (not a signed JWT, another
//     audience, expired) is refused without a review (checkTokenShape);
//   - reviews go through Reviews, which the controller builds on a client of its own:
//     its own rate limit, apart from address allocation and leader election;
//   - at most MaxInFlight reviews run at once; a request that finds no slot within
//     BusyWait gets ErrBusy; concurrent requests with one token share one review;
//   - an answer counts only if kube-apiserver says the token is valid for the audience
//     (status.audiences);
//   - answers are cached by the token's SHA-256, valid ones for TTL and refusals for
//     FailureTTL, in two bounded caches (so junk never pushes out an agent's entry); a
//     full cache evicts its oldest entry, never everything.
//
// So an agent costs one review per TTL, whatever it sends. With the default 5 minutes a
// token kube-apiserver stops accepting (its Node or Pod deleted) is refused on a new
// request within 5 minutes, as an open stream is (the server's periodic check,
// Reauthenticate, skips the cache and refreshes it), and 5,000 agents need about 17
// reviews a second, under the default --token-review-qps of 20 (at a 1-minute TTL they
// needed 83). The valid cache holds 16,384 tokens, two per agent (the old and the new
// while the kubelet rotates them) for 8,192 nodes; only tokens kube-apiserver accepted
// enter it, so a flood of junk cannot fill it.
type TokenReviewer struct {
	Reviews   authnclient.TokenReviewInterface
	Audiences []string
	// TTL and FailureTTL default to DefaultReviewTTL and 10 s.
	TTL, FailureTTL time.Duration
	// MaxEntries, if set, bounds each cache, of valid tokens and of refusals (defaults
	// 16,384 and 4,096).
	MaxEntries int
	// MaxInFlight bounds the reviews in flight (default DefaultReviewsInFlight); BusyWait
	// is how long a request waits for a slot (default 2 s).
	MaxInFlight int
	BusyWait    time.Duration

	now      func() time.Time
	once     sync.Once
	slots    chan struct{}
	mu       sync.Mutex
	valid    reviewCache
	refused  reviewCache
	inflight map[[sha256.Size]byte]*review
}

type reviewEntry struct {
	id      Identity
	err     error
	expires time.Time
}

// review is one TokenReview in flight, which requests with the same token wait for.
type review struct {
	done  chan struct{}
	entry reviewEntry
}

// NewTokenReviewer returns a TokenReviewer for tokens of audience TokenAudience.
func NewTokenReviewer(reviews authnclient.TokenReviewInterface) *TokenReviewer {
	return &TokenReviewer{Reviews: reviews, Audiences: []string{TokenAudience}}
}

func (r *TokenReviewer) init() {
	r.once.Do(func() {
		r.slots = make(chan struct{}, orDefaultInt(r.MaxInFlight, DefaultReviewsInFlight))
		r.valid.max = orDefaultInt(r.MaxEntries, defaultValidEntries)
		r.refused.max = orDefaultInt(r.MaxEntries, defaultRefusedEntries)
		r.inflight = map[[sha256.Size]byte]*review{}
	})
}

// Authenticate implements Authenticator.
func (r *TokenReviewer) Authenticate(ctx context.Context, token string) (Identity, error) {
	return r.authenticate(ctx, token, true)
}

// Reauthenticate implements Reauthenticator: it asks kube-apiserver again whatever is
// cached (a review already in flight for the token is fresh enough), and its answer
// replaces the cached one, so a refusal also ends the token's cached acceptance.
func (r *TokenReviewer) Reauthenticate(ctx context.Context, token string) (Identity, error) {
	return r.authenticate(ctx, token, false)
}

func (r *TokenReviewer) authenticate(ctx context.Context, token string, cached bool) (Identity, error) {
	r.init()
	now := r.clock()
	if err := checkTokenShape(token, r.Audiences, now); err != nil {
		return Identity{}, err
	}
	key := sha256.Sum256([]byte(token))
	r.mu.Lock()
	if e, ok := r.valid.get(key, now); ok && cached {
		r.mu.Unlock()
		return e.id, e.err
	}
	if e, ok := r.refused.get(key, now); ok && cached {
		r.mu.Unlock()
		return e.id, e.err
	}
	if rv, ok := r.inflight[key]; ok {
		r.mu.Unlock()
		return rv.wait(ctx)
	}
	rv := &review{done: make(chan struct{})}
	r.inflight[key] = rv
	r.mu.Unlock()

	e, cache := r.review(ctx, token)
	r.mu.Lock()
	delete(r.inflight, key)
	if cache {
		if e.err == nil {
			r.refused.remove(key)
			r.valid.put(key, e, r.clock())
		} else {
			r.valid.remove(key)
			r.refused.put(key, e, r.clock())
		}
	}
	r.mu.Unlock()
	rv.entry = e
	close(rv.done)
	return e.id, e.err
}

func (rv *review) wait(ctx context.Context) (Identity, error) {
	select {
	case <-rv.done:
		return rv.entry.id, rv.entry.err
	case <-ctx.Done():
		return Identity{}, fmt.Errorf("token review: %w", ctx.Err())
	}
}

// review asks kube-apiserver, in a slot; cache says whether the answer may be cached (a
// failed or refused call may not: it says nothing about the token).
func (r *TokenReviewer) review(ctx context.Context, token string) (e reviewEntry, cache bool) {
	wait := time.NewTimer(orDefault(r.BusyWait, 2*time.Second))
	defer wait.Stop()
	select {
	case r.slots <- struct{}{}:
		defer func() { <-r.slots }()
	case <-wait.C:
		return reviewEntry{err: fmt.Errorf("token review: %w", ErrBusy)}, false
	case <-ctx.Done():
		return reviewEntry{err: fmt.Errorf("token review: %w", ctx.Err())}, false
	}
	res, err := r.Reviews.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: r.Audiences}},
		metav1.CreateOptions{})
	if err != nil {
		return reviewEntry{err: fmt.Errorf("token review: %w", err)}, false
	}
	id, err := identityOf(res.Status, r.Audiences)
	ttl := orDefault(r.TTL, DefaultReviewTTL)
	if err != nil {
		ttl = orDefault(r.FailureTTL, 10*time.Second)
	}
	return reviewEntry{id: id, err: err, expires: r.clock().Add(ttl)}, true
}

func identityOf(st authnv1.TokenReviewStatus, audiences []string) (Identity, error) {
	if !st.Authenticated {
		reason := st.Error
		if reason == "" {
			reason = "token not authenticated"
		}
		return Identity{}, fmt.Errorf("%s: %w", reason, ErrUnauthenticated)
	}
	if !slices.ContainsFunc(st.Audiences, func(a string) bool { return slices.Contains(audiences, a) }) {
		return Identity{}, fmt.Errorf("kube-apiserver validated the token for audiences %q, not %q: %w", st.Audiences, audiences, ErrUnauthenticated)
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

// reviewCache is a bounded cache of answers, oldest first: every entry of one cache
// lives as long, so the oldest is also the first to expire.
type reviewCache struct {
	max   int
	order list.List // of [sha256.Size]byte, oldest at the front
	byKey map[[sha256.Size]byte]*list.Element
	entry map[[sha256.Size]byte]reviewEntry
}

func (c *reviewCache) get(key [sha256.Size]byte, now time.Time) (reviewEntry, bool) {
	e, ok := c.entry[key]
	if !ok || now.After(e.expires) {
		return reviewEntry{}, false
	}
	return e, true
}

// put stores e, evicting first the expired entries at the front, then, when still full,
// the single oldest one.
func (c *reviewCache) put(key [sha256.Size]byte, e reviewEntry, now time.Time) {
	if c.byKey == nil {
		c.byKey, c.entry = map[[sha256.Size]byte]*list.Element{}, map[[sha256.Size]byte]reviewEntry{}
	}
	if el, ok := c.byKey[key]; ok {
		c.drop(el)
	}
	for front := c.order.Front(); front != nil && now.After(c.entry[front.Value.([sha256.Size]byte)].expires); front = c.order.Front() {
		c.drop(front)
	}
	for c.order.Len() >= c.max {
		c.drop(c.order.Front())
	}
	c.byKey[key] = c.order.PushBack(key)
	c.entry[key] = e
}

// remove drops key's entry, if any.
func (c *reviewCache) remove(key [sha256.Size]byte) {
	if el, ok := c.byKey[key]; ok {
		c.drop(el)
	}
}

func (c *reviewCache) drop(el *list.Element) {
	k := el.Value.([sha256.Size]byte)
	c.order.Remove(el)
	delete(c.byKey, k)
	delete(c.entry, k)
}

func (c *reviewCache) len() int { return c.order.Len() }

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

func orDefaultInt(n, def int) int {
	if n <= 0 {
		return def
	}
	return n
}
