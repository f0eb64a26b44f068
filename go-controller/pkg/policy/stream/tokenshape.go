package stream

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Bounds of what may be a ServiceAccount token, checked before kube-apiserver is asked.
const (
	maxTokenBytes = 16 << 10
	// tokenLeeway is the clock skew allowed around a token's exp and nbf.
	tokenLeeway = 30 * time.Second
)

// signingAlgorithms are the JWS algorithms kube-apiserver signs ServiceAccount tokens
// with (RSA and ECDSA keys).
var signingAlgorithms = []string{"RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512"}

// checkTokenShape refuses, without asking kube-apiserver, what cannot be a valid
// ServiceAccount token for audiences at now: anything but a signed JWT (three base64url
// parts, a signing algorithm), with an issuer, whose audience names one of audiences and
// that is not expired or not yet valid. Its signature is kube-apiserver's to check: the
// TokenReview still decides. Errors wrap ErrUnauthenticated.
func checkTokenShape(token string, audiences []string, now time.Time) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("not a ServiceAccount token for %v: %s: %w", audiences, fmt.Sprintf(format, args...), ErrUnauthenticated)
	}
	if len(token) > maxTokenBytes {
		return bad("%d bytes", len(token))
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return bad("not a signed JWT (three base64url parts)")
	}
	var header struct {
		Alg string `json:"alg"`
	}
	if err := decodePart(parts[0], &header); err != nil {
		return bad("header: %v", err)
	}
	if !slices.Contains(signingAlgorithms, header.Alg) {
		return bad("signing algorithm %q", header.Alg)
	}
	if sig, err := base64.RawURLEncoding.DecodeString(parts[2]); err != nil || len(sig) < 32 {
		return bad("no signature")
	}
	var claims tokenClaims
	if err := decodePart(parts[1], &claims); err != nil {
		return bad("claims: %v", err)
	}
	switch {
	case claims.Issuer == "":
		return bad("no issuer")
	case !slices.ContainsFunc(claims.Audience, func(a string) bool { return slices.Contains(audiences, a) }):
		return bad("audience %v", []string(claims.Audience))
	case claims.Expiry == nil:
		return bad("no expiry")
	case now.After(time.Unix(int64(*claims.Expiry), 0).Add(tokenLeeway)):
		return bad("expired at %s", time.Unix(int64(*claims.Expiry), 0).UTC().Format(time.RFC3339))
	case claims.NotBefore != nil && now.Add(tokenLeeway).Before(time.Unix(int64(*claims.NotBefore), 0)):
		return bad("not valid before %s", time.Unix(int64(*claims.NotBefore), 0).UTC().Format(time.RFC3339))
	}
	return nil
}

// tokenClaims are the JWT claims checkTokenShape reads.
type tokenClaims struct {
	Issuer    string    `json:"iss"`
	Audience  audiences `json:"aud"`
	Expiry    *float64  `json:"exp"`
	NotBefore *float64  `json:"nbf"`
}

// audiences is a JWT aud claim: one string or an array of them.
type audiences []string

func (a *audiences) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*a = audiences{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("aud is neither a string nor an array of strings")
	}
	*a = many
	return nil
}

// decodePart decodes a base64url JWT part (padding tolerated) into v.
func decodePart(part string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(part, "="))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
