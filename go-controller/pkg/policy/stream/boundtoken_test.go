package stream

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

const testIssuer = "https://kubernetes.default.svc"

// testIssuerKeys is an issuer with one ECDSA key, its discovery documents served by get,
// which counts the reads of the keys.
type testIssuerKeys struct {
	kid   string
	key   *ecdsa.PrivateKey
	reads atomic.Int64
	fail  atomic.Bool
}

func newTestIssuer(t *testing.T, kid string) *testIssuerKeys {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &testIssuerKeys{kid: kid, key: key}
}

func (i *testIssuerKeys) get(_ context.Context, path string) ([]byte, error) {
	if i.fail.Load() {
		return nil, errors.New("kube-apiserver unreachable")
	}
	switch path {
	case IssuerConfigPath:
		return json.Marshal(map[string]string{"issuer": testIssuer, "jwks_uri": testIssuer + IssuerKeysPath})
	case IssuerKeysPath:
		i.reads.Add(1)
		return json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &i.key.PublicKey, KeyID: i.kid, Algorithm: "ES256", Use: "sig"}}})
	}
	return nil, fmt.Errorf("no %s", path)
}

// boundToken is a token as kube-apiserver issues it to the agents (ServiceAccount
// kube-system/kovs-agent, UID sa-uid), bound to node1 (UID node-uid) and, when pod is
// set, to that Pod (UID pod-uid), signed with key under kid; edit changes its claims
// before signing.
func boundToken(t *testing.T, key *ecdsa.PrivateKey, kid string, pod string, edit func(std *jwt.Claims, k map[string]any)) string {
	t.Helper()
	now := time.Now()
	std := jwt.Claims{Issuer: testIssuer, Subject: agentUser, Audience: jwt.Audience{TokenAudience},
		IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(time.Hour))}
	k := map[string]any{"namespace": "kube-system",
		"serviceaccount": map[string]string{"name": "kovs-agent", "uid": "sa-uid"},
		"node":           map[string]string{"name": "node1", "uid": "node-uid"}}
	if pod != "" {
		k["pod"] = map[string]string{"name": pod, "uid": "pod-uid"}
	}
	if edit != nil {
		edit(&std, k)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	token, err := jwt.Signed(signer).Claims(std).Claims(map[string]any{"kubernetes.io": k}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// testObjects are the informers' objects: the agents' ServiceAccount, node1, and the
// agent's Pod kovs-agent-1 on it.
type testObjects map[string]*BoundObject

func newTestObjects() testObjects {
	return testObjects{
		"sa/kube-system/kovs-agent":    {UID: "sa-uid"},
		"node/node1":                   {UID: "node-uid"},
		"pod/kube-system/kovs-agent-1": {UID: "pod-uid", Node: "node1", ServiceAccount: "kovs-agent"},
	}
}

func (o testObjects) ServiceAccount(ns, name string) *BoundObject { return o["sa/"+ns+"/"+name] }
func (o testObjects) Node(name string) *BoundObject               { return o["node/"+name] }
func (o testObjects) Pod(ns, name string) *BoundObject            { return o["pod/"+ns+"/"+name] }

// countingFallback stands for the TokenReviewer: it accepts every token as node1's
// agent, and counts.
type countingFallback struct{ calls, recalls atomic.Int64 }

func (f *countingFallback) Authenticate(context.Context, string) (Identity, error) {
	f.calls.Add(1)
	return Identity{User: agentUser, Node: "node1"}, nil
}

func (f *countingFallback) Reauthenticate(context.Context, string) (Identity, error) {
	f.recalls.Add(1)
	return Identity{User: agentUser, Node: "node1"}, nil
}

func newTestVerifier(issuer *testIssuerKeys, objects testObjects) (*BoundTokenVerifier, *countingFallback, map[string]int) {
	fb := &countingFallback{}
	decided := map[string]int{}
	return &BoundTokenVerifier{Keys: &IssuerKeys{Get: issuer.get}, Objects: objects, Fallback: fb,
		Audiences: []string{TokenAudience}, Decided: func(how string) { decided[how]++ }}, fb, decided
}

func TestBoundTokenVerifierDecides(t *testing.T) {
	issuer := newTestIssuer(t, "key-1")
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	deleted := newTestObjects()
	deleted["pod/kube-system/kovs-agent-1"].Deleted = time.Now().Add(-2 * time.Minute)
	deleting := newTestObjects()
	deleting["node/node1"].Deleted = time.Now().Add(-10 * time.Second)
	recreated := newTestObjects()
	recreated["sa/kube-system/kovs-agent"].UID = "sa-uid-2"
	noNode := newTestObjects()
	delete(noNode, "node/node1")
	moved := newTestObjects()
	moved["pod/kube-system/kovs-agent-1"].Node = "node2"

	for _, tc := range []struct {
		name    string
		token   string
		objects testObjects
		// want: "local" (accepted as node1's agent here), "review" (passed to the
		// TokenReview), "refused" (ErrUnauthenticated here).
		want string
	}{
		{"node-bound", boundToken(t, issuer.key, "key-1", "", nil), nil, "local"},
		{"pod-bound", boundToken(t, issuer.key, "key-1", "kovs-agent-1", nil), nil, "local"},
		{"pod deleted over a minute ago", boundToken(t, issuer.key, "key-1", "kovs-agent-1", nil), deleted, "refused"},
		{"node being deleted for 10 s", boundToken(t, issuer.key, "key-1", "", nil), deleting, "local"},
		{"signed by another key under the issuer's key ID", boundToken(t, other, "key-1", "", nil), nil, "refused"},
		{"a key ID the issuer does not publish", boundToken(t, other, "key-2", "", nil), nil, "review"},
		{"another issuer", boundToken(t, issuer.key, "key-1", "", func(std *jwt.Claims, _ map[string]any) { std.Issuer = "https://other" }), nil, "review"},
		{"another audience", boundToken(t, issuer.key, "key-1", "", func(std *jwt.Claims, _ map[string]any) { std.Audience = jwt.Audience{"other"} }), nil, "refused"},
		{"expired", boundToken(t, issuer.key, "key-1", "", func(std *jwt.Claims, _ map[string]any) {
			std.Expiry = jwt.NewNumericDate(time.Now().Add(-2 * time.Minute))
		}), nil, "refused"},
		{"subject is not the bound ServiceAccount", boundToken(t, issuer.key, "key-1", "", func(std *jwt.Claims, _ map[string]any) {
			std.Subject = ServiceAccountUser("kube-system", "admin")
		}), nil, "refused"},
		{"not bound to a node", boundToken(t, issuer.key, "key-1", "", func(_ *jwt.Claims, k map[string]any) { delete(k, "node") }), nil, "review"},
		{"bound to a Secret", boundToken(t, issuer.key, "key-1", "", func(_ *jwt.Claims, k map[string]any) {
			k["secret"] = map[string]string{"name": "s", "uid": "u"}
		}), nil, "review"},
		{"ServiceAccount recreated (or the informer behind)", boundToken(t, issuer.key, "key-1", "", nil), recreated, "review"},
		{"node not in the informer", boundToken(t, issuer.key, "key-1", "", nil), noNode, "review"},
		{"pod on another node than the token says", boundToken(t, issuer.key, "key-1", "kovs-agent-1", nil), moved, "review"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objects := tc.objects
			if objects == nil {
				objects = newTestObjects()
			}
			v, fb, decided := newTestVerifier(issuer, objects)
			id, err := v.Authenticate(context.Background(), tc.token)
			switch tc.want {
			case "local":
				if err != nil || id != (Identity{User: agentUser, Node: "node1"}) {
					t.Errorf("got %+v, %v; want node1's agent", id, err)
				}
			case "refused":
				if !errors.Is(err, ErrUnauthenticated) {
					t.Errorf("got %+v, %v; want a refusal", id, err)
				}
			case "review":
				if err != nil || fb.calls.Load() != 1 {
					t.Errorf("got %+v, %v after %d reviews; want the review's answer", id, err, fb.calls.Load())
				}
			}
			if tc.want != "review" && fb.calls.Load() != 0 {
				t.Errorf("%d TokenReviews, want none", fb.calls.Load())
			}
			if decided[tc.want] != 1 || len(decided) != 1 {
				t.Errorf("decided %v, want one %s", decided, tc.want)
			}
		})
	}
}

// An open stream's periodic check reads the informers again: an agent whose Pod was
// deleted is refused, and what goes to the review skips its cache.
func TestBoundTokenVerifierReauthenticates(t *testing.T) {
	issuer := newTestIssuer(t, "key-1")
	objects := newTestObjects()
	v, fb, _ := newTestVerifier(issuer, objects)
	token := boundToken(t, issuer.key, "key-1", "kovs-agent-1", nil)
	if _, err := v.Authenticate(context.Background(), token); err != nil {
		t.Fatal(err)
	}
	objects["pod/kube-system/kovs-agent-1"].Deleted = time.Now().Add(-2 * time.Minute)
	if _, err := v.Reauthenticate(context.Background(), token); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("after the Pod's deletion: %v, want a refusal", err)
	}
	delete(objects, "pod/kube-system/kovs-agent-1")
	if _, err := v.Reauthenticate(context.Background(), token); err != nil || fb.recalls.Load() != 1 || fb.calls.Load() != 0 {
		t.Errorf("Pod gone from the informer: %v, %d reviews without the cache and %d with it; want one without", err, fb.recalls.Load(), fb.calls.Load())
	}
}

// The keys are read once for many tokens, again for an unknown key ID at most every
// MinRefresh whatever the number of such tokens, and every Refresh; keys not read for two
// Refresh periods are not used.
func TestIssuerKeysRefresh(t *testing.T) {
	issuer := newTestIssuer(t, "key-1")
	now := time.Unix(1_800_000_000, 0)
	keys := &IssuerKeys{Get: issuer.get, Refresh: 5 * time.Minute, MinRefresh: 10 * time.Second, now: func() time.Time { return now }}
	ctx := context.Background()
	for range 100 {
		if _, _, err := keys.Key(ctx, "key-1"); err != nil {
			t.Fatal(err)
		}
	}
	if n := issuer.reads.Load(); n != 1 {
		t.Fatalf("%d reads for 100 tokens of a known key, want 1", n)
	}
	for i := range 1000 {
		if _, _, err := keys.Key(ctx, fmt.Sprintf("junk-%d", i)); !errors.Is(err, errUndecided) {
			t.Fatalf("junk key ID: %v, want it left to a review", err)
		}
	}
	if n := issuer.reads.Load(); n != 1 {
		t.Errorf("%d reads after 1,000 junk key IDs within MinRefresh, want still 1", n)
	}
	now = now.Add(11 * time.Second)
	for i := range 1000 {
		_, _, _ = keys.Key(ctx, fmt.Sprintf("junk-%d", i))
	}
	if n := issuer.reads.Load(); n != 2 {
		t.Errorf("%d reads after MinRefresh and 1,000 more junk key IDs, want 2", n)
	}
	now = now.Add(5 * time.Minute)
	if _, _, err := keys.Key(ctx, "key-1"); err != nil || issuer.reads.Load() != 3 {
		t.Errorf("after Refresh: %v, %d reads; want the key read again (3)", err, issuer.reads.Load())
	}
	issuer.fail.Store(true)
	now = now.Add(6 * time.Minute)
	if _, _, err := keys.Key(ctx, "key-1"); err != nil {
		t.Errorf("one failed read after Refresh: %v, want the keys read 6 minutes ago still used", err)
	}
	now = now.Add(5 * time.Minute)
	_, _, err := keys.Key(ctx, "key-1")
	if !errors.Is(err, errUndecided) || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("keys last read 11 minutes ago (Refresh 5): %v, want them unused, saying why", err)
	}
}

// A token's signature is checked once: later uses of the same token take its claims from
// the verified tokens while the issuer's key is the one it verified with, and still check
// its times and bound objects every time. A token signed by another key under the same
// key ID is another token, and refused.
func TestBoundTokenVerifierChecksASignatureOnce(t *testing.T) {
	issuer := newTestIssuer(t, "key-1")
	objects := newTestObjects()
	now := time.Now()
	v, _, decided := newTestVerifier(issuer, objects)
	v.now = func() time.Time { return now }
	v.Keys = &IssuerKeys{Get: issuer.get, Refresh: 5 * time.Minute, MinRefresh: 10 * time.Second, now: func() time.Time { return now }}
	ctx := context.Background()
	token := boundToken(t, issuer.key, "key-1", "kovs-agent-1", nil)
	for i := range 3 {
		if id, err := v.Authenticate(ctx, token); err != nil || id.Node != "node1" {
			t.Fatalf("use %d: %+v, %v", i, id, err)
		}
	}
	if n := v.signatures.Load(); n != 1 {
		t.Errorf("%d signatures checked for 3 uses of one token, want 1", n)
	}
	// A well signed token this verifier does not accept (another ServiceAccount's: a
	// review decides) is not kept: only the agents' tokens are.
	stranger := boundToken(t, issuer.key, "key-1", "", func(std *jwt.Claims, k map[string]any) {
		std.Subject = ServiceAccountUser("default", "stranger")
		k["namespace"] = "default"
		k["serviceaccount"] = map[string]string{"name": "stranger", "uid": "stranger-uid"}
	})
	for range 2 {
		if _, err := v.Authenticate(ctx, stranger); err != nil {
			t.Fatal(err)
		}
	}
	if n := v.signatures.Load(); n != 3 || len(v.signed) != 1 || decided["review"] != 2 {
		t.Errorf("after two uses of another ServiceAccount's token: %d signatures checked, %d tokens kept, decided %v; want 3, 1 and 2 reviews",
			n, len(v.signed), decided)
	}
	decided["review"] = 0
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Authenticate(ctx, boundToken(t, other, "key-1", "kovs-agent-1", nil)); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("a token signed by another key under key-1: %v, want a refusal", err)
	}
	// The keys read again (past Refresh) are new keys: the token is verified again.
	now = now.Add(6 * time.Minute)
	before := v.signatures.Load()
	if _, err := v.Authenticate(ctx, token); err != nil {
		t.Fatal(err)
	}
	if n := v.signatures.Load() - before; n != 1 {
		t.Errorf("%d signatures checked after the keys were read again, want 1", n)
	}
	// A verified token still expires, and still dies with its Pod.
	objects["pod/kube-system/kovs-agent-1"].Deleted = now.Add(-2 * time.Minute)
	if _, err := v.Authenticate(ctx, token); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("after the Pod's deletion: %v, want a refusal", err)
	}
	objects["pod/kube-system/kovs-agent-1"].Deleted = time.Time{}
	now = now.Add(2 * time.Hour)
	if _, err := v.Authenticate(ctx, token); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("after its expiry: %v, want a refusal", err)
	}
	if decided["review"] != 0 {
		t.Errorf("decided %v: nothing should have gone to a review", decided)
	}
}

// TestBoundTokenVerifierDropsExpiredTokensFirst: when the verified tokens reach their
// bound, the expired ones go and the live ones stay verified; only when the live ones
// fill most of the bound are all dropped.
func TestBoundTokenVerifierDropsExpiredTokensFirst(t *testing.T) {
	issuer := newTestIssuer(t, "key-1")
	start := time.Now()
	now := start
	v, _, _ := newTestVerifier(issuer, newTestObjects())
	v.now = func() time.Time { return now }
	v.Keys = &IssuerKeys{Get: issuer.get, Refresh: 24 * time.Hour, MinRefresh: 10 * time.Second, now: func() time.Time { return now }}
	v.maxSigned = 8
	ctx := context.Background()
	token := func(id string, expiry time.Time) string {
		return boundToken(t, issuer.key, "key-1", "kovs-agent-1", func(std *jwt.Claims, _ map[string]any) {
			std.ID, std.Expiry = id, jwt.NewNumericDate(expiry)
		})
	}
	use := func(tok string) {
		t.Helper()
		if _, err := v.Authenticate(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	var live []string
	for i := range 6 {
		use(token(fmt.Sprintf("short-%d", i), start.Add(10*time.Minute)))
	}
	for i := range 2 {
		live = append(live, token(fmt.Sprintf("long-%d", i), start.Add(2*time.Hour)))
		use(live[i])
	}
	if len(v.signed) != 8 {
		t.Fatalf("%d tokens kept, want 8", len(v.signed))
	}
	now = start.Add(time.Hour)
	live = append(live, token("long-2", start.Add(2*time.Hour)))
	use(live[2])
	if len(v.signed) != 3 {
		t.Errorf("a token past the bound with 6 of 8 expired: %d kept, want the 3 live ones", len(v.signed))
	}
	before := v.signatures.Load()
	for _, tok := range live {
		use(tok)
	}
	if n := v.signatures.Load() - before; n != 0 {
		t.Errorf("%d signatures checked again for live tokens the sweep kept, want 0", n)
	}
	for i := 3; len(v.signed) < 8; i++ {
		use(token(fmt.Sprintf("long-%d", i), start.Add(2*time.Hour)))
	}
	use(token("long-last", start.Add(2*time.Hour)))
	if len(v.signed) != 1 {
		t.Errorf("a token past the bound with none expired: %d kept, want 1 (all dropped)", len(v.signed))
	}
}
