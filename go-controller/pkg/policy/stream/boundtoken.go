package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	log "github.com/sirupsen/logrus"
)

// Paths of kube-apiserver's ServiceAccount issuer discovery (KEP-1393), read through the
// controller's own client: the issuer, and the public keys it signs tokens with.
const (
	IssuerConfigPath = "/.well-known/openid-configuration"
	IssuerKeysPath   = "/openid/v1/jwks"
)

// keysReadTimeout bounds one read of the issuer's keys (requests wait for it).
const keysReadTimeout = 10 * time.Second

// boundTokenLeeway is the clock skew allowed around exp and nbf, and how long an object
// being deleted still vouches for its tokens: kube-apiserver's own (jwt.DefaultLeeway).
const boundTokenLeeway = jwt.DefaultLeeway

// joseAlgorithms are signingAlgorithms as go-jose names them.
var joseAlgorithms = func() []jose.SignatureAlgorithm {
	algs := make([]jose.SignatureAlgorithm, len(signingAlgorithms))
	for i, a := range signingAlgorithms {
		algs[i] = jose.SignatureAlgorithm(a)
	}
	return algs
}()

// BoundObjects answers, from the controller's informers, whether the objects a token is
// bound to still exist: a nil answer means the informer holds no such object.
type BoundObjects interface {
	ServiceAccount(namespace, name string) *BoundObject
	Node(name string) *BoundObject
	Pod(namespace, name string) *BoundObject
}

// BoundObject is what a token's binding is checked against.
type BoundObject struct {
	UID string
	// Deleted is the object's deletionTimestamp (zero while it is not being deleted).
	Deleted time.Time
	// Node and ServiceAccount are a Pod's spec.nodeName and spec.serviceAccountName.
	Node, ServiceAccount string
}

// BoundTokenVerifier authenticates the agents' ServiceAccount tokens without asking
// kube-apiserver, as kube-apiserver itself validates them: the signature with the
// issuer's public keys (Keys, read from kube-apiserver's issuer discovery), the issuer,
// audience, expiry, and that the ServiceAccount, Pod and Node the token is bound to still
// exist with the UIDs it names (Objects, the controller's informers), none deleted more
// than a minute ago. A new leader can so let 5,000 agents in at the rate of its CPU
// rather than at --token-review-qps (docs/scale.md).
//
// What it cannot decide goes to Fallback, the TokenReviewer: a key ID the issuer does not
// publish (after reading the keys again, at most every MinRefresh), keys not read
// successfully for two Refresh periods, another issuer, a token without a node binding or
// bound to a Secret, an object the informers do not hold or hold with another UID (they
// may lag behind kube-apiserver). A signature that does not verify with the issuer's key
// of that ID is refused at once: kube-apiserver would refuse it too, and a forgery costs
// no review.
type BoundTokenVerifier struct {
	Keys      *IssuerKeys
	Objects   BoundObjects
	Fallback  Reauthenticator
	Audiences []string
	// Decided, if set, is called with "local", "review" or "refused" for every answer:
	// accepted here, passed to Fallback, refused here.
	Decided func(how string)

	now func() time.Time
	// signed are the tokens accepted here, by the token: a token is verified
	// on the stream's request and again on every realization report of its agent (each
	// signature check and claims parse was 14 % of kovs-controller's CPU under churn at
	// 5,000 nodes). An entry stands only while the issuer's key for its kid is the same
	// key it verified with; the claims' times and the bound objects are checked on every
	// use, as before.
	mu     sync.Mutex
	signed map[string]signedToken
	// maxSigned bounds signed (0: maxSignedTokens; tests set less).
	maxSigned int
	// signatures counts the signatures checked (for tests).
	signatures atomic.Int64
}

// signedToken is what a verified signature gave: the key it verified with and the claims.
type signedToken struct {
	kid   string
	key   any
	std   jwt.Claims
	bound boundClaims
}

// maxSignedTokens bounds the verified tokens kept. An agent's token is renewed hourly, so
// the live ones are about one per agent, and the expired ones pile up: when the bound is
// reached the expired ones are dropped, and only if that frees less than a quarter of it
// are all dropped (every agent's next use verifies its signature again).
const maxSignedTokens = 1 << 16

// Authenticate implements Authenticator.
func (v *BoundTokenVerifier) Authenticate(ctx context.Context, token string) (Identity, error) {
	return v.authenticate(ctx, token, v.Fallback.Authenticate)
}

// Reauthenticate implements Reauthenticator: the local check reads the informers afresh
// every time; what goes to Fallback skips its cache.
func (v *BoundTokenVerifier) Reauthenticate(ctx context.Context, token string) (Identity, error) {
	return v.authenticate(ctx, token, v.Fallback.Reauthenticate)
}

func (v *BoundTokenVerifier) authenticate(ctx context.Context, token string, fallback func(context.Context, string) (Identity, error)) (Identity, error) {
	now := v.clock()
	if err := checkTokenShape(token, v.Audiences, now); err != nil {
		v.decided("refused")
		return Identity{}, err
	}
	id, err := v.verify(ctx, token, now)
	switch {
	case err == nil:
		v.decided("local")
		return id, nil
	case errors.Is(err, ErrUnauthenticated):
		v.decided("refused")
		return Identity{}, err
	}
	v.decided("review")
	log.WithError(err).Debug("policy stream: agent token left to a TokenReview")
	return fallback(ctx, token)
}

// errUndecided wraps why the local check leaves a token to the TokenReview.
var errUndecided = errors.New("left to a TokenReview")

// boundClaims are the claims kube-apiserver adds to a bound ServiceAccount token.
type boundClaims struct {
	Kubernetes struct {
		Namespace      string     `json:"namespace"`
		ServiceAccount *objectRef `json:"serviceaccount"`
		Pod            *objectRef `json:"pod"`
		Node           *objectRef `json:"node"`
		Secret         *objectRef `json:"secret"`
	} `json:"kubernetes.io"`
}

type objectRef struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}

// verify returns the token's identity, an error wrapping ErrUnauthenticated for a token
// kube-apiserver would refuse, or one wrapping errUndecided.
func (v *BoundTokenVerifier) verify(ctx context.Context, token string, now time.Time) (Identity, error) {
	issuer, st, cached, err := v.signedClaims(ctx, token)
	if err != nil {
		return Identity{}, err
	}
	std, bound := st.std, st.bound
	if std.Issuer != issuer {
		return Identity{}, fmt.Errorf("issuer %q is not %q: %w", std.Issuer, issuer, errUndecided)
	}
	if err := std.ValidateWithLeeway(jwt.Expected{AnyAudience: v.Audiences, Time: now}, boundTokenLeeway); err != nil {
		return Identity{}, fmt.Errorf("token claims: %v: %w", err, ErrUnauthenticated)
	}
	id, err := v.checkBinding(std.Subject, bound, now)
	if err == nil && !cached {
		// Only a token accepted here is kept: one per agent, not one per token anyone
		// with a signed token of another ServiceAccount sends.
		v.mu.Lock()
		v.keepSigned(token, st, now)
		v.mu.Unlock()
	}
	return id, err
}

// keepSigned keeps a verified token, making room within the bound first (maxSignedTokens).
// v.mu is held.
func (v *BoundTokenVerifier) keepSigned(token string, st signedToken, now time.Time) {
	limit := v.maxSigned
	if limit == 0 {
		limit = maxSignedTokens
	}
	if v.signed == nil {
		v.signed = map[string]signedToken{}
	}
	if len(v.signed) >= limit {
		for t, kept := range v.signed {
			if kept.expired(now) {
				delete(v.signed, t)
			}
		}
		if len(v.signed) > limit*3/4 {
			v.signed = map[string]signedToken{}
		}
	}
	v.signed[token] = st
}

// expired reports whether the token can no longer be accepted: past its expiry and the
// leeway the check allows.
func (st signedToken) expired(now time.Time) bool {
	return st.std.Expiry != nil && now.After(st.std.Expiry.Time().Add(boundTokenLeeway))
}

// signedClaims returns the issuer and the token's claims once its signature verifies
// with the issuer's current key for its kid: from the verified tokens (cached) when that
// key is the one it verified with.
func (v *BoundTokenVerifier) signedClaims(ctx context.Context, token string) (string, signedToken, bool, error) {
	v.mu.Lock()
	st, ok := v.signed[token]
	v.mu.Unlock()
	if ok {
		issuer, key, err := v.Keys.Key(ctx, st.kid)
		if err != nil {
			return "", signedToken{}, false, err
		}
		if sameKey(key.Key, st.key) {
			return issuer, st, true, nil
		}
	}
	tok, err := jwt.ParseSigned(token, joseAlgorithms)
	if err != nil || len(tok.Headers) != 1 {
		return "", signedToken{}, false, fmt.Errorf("not a signed JWT: %v: %w", err, ErrUnauthenticated)
	}
	kid := tok.Headers[0].KeyID
	issuer, key, err := v.Keys.Key(ctx, kid)
	if err != nil {
		return "", signedToken{}, false, err
	}
	st = signedToken{kid: kid, key: key.Key}
	v.signatures.Add(1)
	if err := tok.Claims(key.Key, &st.std, &st.bound); err != nil {
		return "", signedToken{}, false, fmt.Errorf("signature does not verify with the issuer's key %q: %w", kid, ErrUnauthenticated)
	}
	return issuer, st, false, nil
}

// sameKey reports whether a and b are one key: the same pointer (a key read again is a
// new one). Keys of a type that cannot be compared are never the same.
func sameKey(a, b any) bool {
	t := reflect.TypeOf(a)
	return t != nil && t == reflect.TypeOf(b) && t.Comparable() && a == b
}

// checkBinding checks the objects a token is bound to against the informers, as
// kube-apiserver checks them against its own.
func (v *BoundTokenVerifier) checkBinding(subject string, c boundClaims, now time.Time) (Identity, error) {
	k := c.Kubernetes
	switch {
	case k.ServiceAccount == nil || k.Namespace == "":
		return Identity{}, fmt.Errorf("no ServiceAccount claims: %w", errUndecided)
	case k.Secret != nil:
		return Identity{}, fmt.Errorf("bound to a Secret: %w", errUndecided)
	case k.Node == nil:
		return Identity{}, fmt.Errorf("not bound to a node: %w", errUndecided)
	case subject != ServiceAccountUser(k.Namespace, k.ServiceAccount.Name):
		return Identity{}, fmt.Errorf("subject %q is not ServiceAccount %s/%s: %w", subject, k.Namespace, k.ServiceAccount.Name, ErrUnauthenticated)
	}
	deletedBefore := now.Add(-boundTokenLeeway)
	check := func(kind, name string, ref *objectRef, o *BoundObject) error {
		switch {
		case o == nil:
			return fmt.Errorf("%s %s not in the informer: %w", kind, name, errUndecided)
		case o.UID != ref.UID:
			return fmt.Errorf("%s %s has UID %s, the token names %s: %w", kind, name, o.UID, ref.UID, errUndecided)
		case !o.Deleted.IsZero() && o.Deleted.Before(deletedBefore):
			return fmt.Errorf("%s %s was deleted at %s: %w", kind, name, o.Deleted.UTC().Format(time.RFC3339), ErrUnauthenticated)
		}
		return nil
	}
	sa := k.Namespace + "/" + k.ServiceAccount.Name
	if err := check("ServiceAccount", sa, k.ServiceAccount, v.Objects.ServiceAccount(k.Namespace, k.ServiceAccount.Name)); err != nil {
		return Identity{}, err
	}
	if k.Pod != nil {
		pod := v.Objects.Pod(k.Namespace, k.Pod.Name)
		if err := check("Pod", k.Namespace+"/"+k.Pod.Name, k.Pod, pod); err != nil {
			return Identity{}, err
		}
		if pod.ServiceAccount != k.ServiceAccount.Name || pod.Node != k.Node.Name {
			return Identity{}, fmt.Errorf("Pod %s/%s runs as %s on node %q, the token names %s on %q: %w",
				k.Namespace, k.Pod.Name, pod.ServiceAccount, pod.Node, k.ServiceAccount.Name, k.Node.Name, errUndecided)
		}
	}
	if err := check("Node", k.Node.Name, k.Node, v.Objects.Node(k.Node.Name)); err != nil {
		return Identity{}, err
	}
	return Identity{User: ServiceAccountUser(k.Namespace, k.ServiceAccount.Name), Node: k.Node.Name}, nil
}

func (v *BoundTokenVerifier) decided(how string) {
	if v.Decided != nil {
		v.Decided(how)
	}
}

func (v *BoundTokenVerifier) clock() time.Time {
	if v.now != nil {
		return v.now()
	}
	return time.Now()
}

// IssuerKeys is kube-apiserver's ServiceAccount issuer and its public keys, read with Get
// (the controller's client) from IssuerConfigPath and IssuerKeysPath: every Refresh, and
// when a token names a key ID not among them, at most every MinRefresh (so junk key IDs
// cost kube-apiserver one read per MinRefresh, whatever their number). Keys not read
// successfully for two Refresh periods are not used: a key kube-apiserver stopped
// publishing is trusted at most that long.
type IssuerKeys struct {
	Get func(ctx context.Context, path string) ([]byte, error)
	// Refresh and MinRefresh default to DefaultReviewTTL and 10 s.
	Refresh, MinRefresh time.Duration

	now       func() time.Time
	mu        sync.Mutex // held while reading, so concurrent requests share one read
	issuer    string
	keys      map[string]jose.JSONWebKey
	read      time.Time // the last successful read
	attempted time.Time // the last read, successful or not
	err       error     // the last read's error
}

// Key returns the issuer and its key kid, or an error wrapping errUndecided.
func (k *IssuerKeys) Key(ctx context.Context, kid string) (string, jose.JSONWebKey, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.clock()
	refresh, minRefresh := orDefault(k.Refresh, DefaultReviewTTL), orDefault(k.MinRefresh, 10*time.Second)
	if _, known := k.keys[kid]; (!known || now.Sub(k.read) >= refresh) && now.Sub(k.attempted) >= minRefresh {
		k.fetch(ctx, now)
	}
	switch key, ok := k.keys[kid]; {
	case k.read.IsZero() || now.Sub(k.read) >= 2*refresh:
		return "", jose.JSONWebKey{}, fmt.Errorf("the issuer's keys are not read (%v): %w", k.err, errUndecided)
	case !ok:
		return "", jose.JSONWebKey{}, fmt.Errorf("the issuer publishes no key %q: %w", kid, errUndecided)
	default:
		return k.issuer, key, nil
	}
}

// Read reads the issuer and its keys now (a server reads them before it listens).
func (k *IssuerKeys) Read(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.fetch(ctx, k.clock())
	return k.err
}

// fetch reads the issuer and its keys; on failure it keeps the ones it had. The read is
// the issuer's, not the request's that wants it: a client that goes away does not fail it.
func (k *IssuerKeys) fetch(ctx context.Context, now time.Time) {
	k.attempted = now
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), keysReadTimeout)
	defer cancel()
	issuer, keys, err := k.readKeys(ctx)
	if k.err = err; err != nil {
		return
	}
	k.issuer, k.keys, k.read = issuer, keys, now
}

func (k *IssuerKeys) readKeys(ctx context.Context) (string, map[string]jose.JSONWebKey, error) {
	raw, err := k.Get(ctx, IssuerConfigPath)
	if err != nil {
		return "", nil, fmt.Errorf("read %s: %w", IssuerConfigPath, err)
	}
	var config struct {
		Issuer string `json:"issuer"`
	}
	if err := json.Unmarshal(raw, &config); err != nil || config.Issuer == "" {
		return "", nil, fmt.Errorf("%s names no issuer (%v)", IssuerConfigPath, err)
	}
	if raw, err = k.Get(ctx, IssuerKeysPath); err != nil {
		return "", nil, fmt.Errorf("read %s: %w", IssuerKeysPath, err)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(raw, &set); err != nil {
		return "", nil, fmt.Errorf("%s: %w", IssuerKeysPath, err)
	}
	keys := map[string]jose.JSONWebKey{}
	for _, key := range set.Keys {
		if key.KeyID != "" && key.IsPublic() && key.Valid() && (key.Use == "" || key.Use == "sig") {
			keys[key.KeyID] = key
		}
	}
	return config.Issuer, keys, nil
}

func (k *IssuerKeys) clock() time.Time {
	if k.now != nil {
		return k.now()
	}
	return time.Now()
}
