package stream

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ErrUnauthenticated is returned (wrapped) by an Authenticator for a missing, invalid or
// expired credential: the server answers 401.
var ErrUnauthenticated = errors.New("unauthenticated")

// ErrForbidden is returned (wrapped) by an Authorizer: the server answers 403.
var ErrForbidden = errors.New("forbidden")

// NodeNameExtra is the user-info extra key under which kube-apiserver names the node a
// ServiceAccount token is bound to (bound to the Node itself, or to a Pod on it).
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// Identity is who presented a credential: a user name and, when the credential is bound to
// a node, that node.
type Identity struct {
	User string
	Node string
}

// Authenticator turns a bearer token into an Identity. Errors that are not
// ErrUnauthenticated mean the token could not be checked (the server answers 503 and the
// client retries).
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (Identity, error)
}

// A Reauthenticator is an Authenticator that can also check a token again without the
// answers it has cached. The server uses it for the periodic check of an open stream, so
// a token kube-apiserver no longer accepts ends the stream within ReauthInterval,
// whatever the cache keeps.
type Reauthenticator interface {
	Authenticator
	Reauthenticate(ctx context.Context, token string) (Identity, error)
}

// Authorizer decides whether an identity may read, and report for, a node's share. Its
// refusals wrap ErrForbidden.
type Authorizer interface {
	Authorize(id Identity, node string) error
}

// AgentAuthorizer lets the agents' ServiceAccount in, each only for the node its token is
// bound to.
type AgentAuthorizer struct {
	// User is the agents' user name, system:serviceaccount:<namespace>:<name>.
	User string
}

// ServiceAccountUser is the user name of a ServiceAccount.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// Authorize implements Authorizer.
func (a AgentAuthorizer) Authorize(id Identity, node string) error {
	switch {
	case id.User != a.User:
		return fmt.Errorf("%s is not a kovs agent (%s): %w", id.User, a.User, ErrForbidden)
	case id.Node == "":
		return fmt.Errorf("the token of %s is not bound to a node (use a token bound to the Node or to the agent's Pod): %w", id.User, ErrForbidden)
	case id.Node != node:
		return fmt.Errorf("the agent of node %s may not read the share of node %s: %w", id.Node, node, ErrForbidden)
	}
	return nil
}

// bearerToken returns the token of an "Authorization: Bearer" header.
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
