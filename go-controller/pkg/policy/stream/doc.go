// Package stream carries each node's share of the compiled NetworkPolicy from
// kovs-controller to the node's kovs-agent, and the agent's realized generation back.
//
// # Protocol
//
// HTTPS only (TLS 1.3), HTTP/2 when both ends offer it, so that the stream and the
// reports share one connection. Every request carries the agent's credential as
// "Authorization: Bearer <token>".
//
//	GET  /v1/nodes/{node}/policy    200, a stream of newline-delimited JSON Messages
//	POST /v1/nodes/{node}/realized  {"generation": N} -> 204
//	GET  /healthz                   200 "ok" (no credential)
//
// The stream's response names the controller's protocol version in the
// Kovs-Policy-Stream-Version header (ProtocolVersion; controllers before the pod address
// change of 2026-12-05 name none, version 1). A client refuses a controller older than
// MinProtocolVersion before reading anything from it (ControllerTooOldError, which a Sink
// that implements ControllerNotifier is told) and retries with backoff until it is
// upgraded.
//
// The stream starts with one snapshot (the node's whole share), then one delta per change,
// each from the generation of the previous message to its own. Deltas coalesce on the
// server while the agent is slow, so an agent is never more than one delta behind. A
// keepalive carries the last generation sent and is written whenever the stream has been
// quiet for a keepalive interval (also while the server waits for its compiler to be
// ready); a client that hears nothing for three intervals reconnects.
//
// The client hands snapshot and deltas to a policy.Sink. When the sink refuses a message
// (policy.ErrGeneration: the agent missed something), or a delta does not start where the
// last one ended, the client drops the connection and reconnects at once for a fresh
// snapshot; other failures reconnect with exponential backoff (0.5 s to 30 s, jittered).
// It reports Sink.Realized after every message and whenever it changes (polled every
// 250 ms, or signalled by a sink that implements RealizedNotifier), and at least every
// 30 s; it reports only generations delivered on the current connection, so a value left
// over from an earlier connection is never taken for the current one.
//
// # Authentication and authorization
//
// An agent presents a ServiceAccount token whose audience is the controller's
// (TokenAudience) and that is bound to its Node (TokenRequest with boundObjectRef kind
// Node) or to its own Pod (a projected token: kube-apiserver adds the pod's node). The
// controller accepts the request only if the token is valid, belongs to the agents'
// ServiceAccount (system:serviceaccount:kube-system:kovs-agent by default), and is bound
// to the {node} of the URL. By default it decides that itself (BoundTokenVerifier): the
// signature with the issuer's keys from kube-apiserver's issuer discovery, the issuer,
// audience and expiry, and the ServiceAccount, Node and Pod the token names against its
// informers; what it cannot decide (an unknown key ID, another issuer, an object its
// informers do not hold with that UID) it asks kube-apiserver in a TokenReview with that
// audience (TokenReviewer), whose authentication.kubernetes.io/node-name must then be the
// {node}. A request without a valid token gets 401; an authenticated client that is not
// that node's agent, 403; a TokenReview that could not be made, 503. The port is open to
// whoever reaches it, so the controller asks kube-apiserver as little as it can: what
// cannot be a ServiceAccount token for the audience (not a signed JWT, another audience,
// expired) and a signature the issuer's key does not verify are refused without a
// review; reviews run on a client of their own, at most a few at once (a request that
// finds no slot gets 503 and retries); an answer counts only for the audience
// kube-apiserver validated (status.audiences); valid tokens are cached for five minutes
// and refusals for ten seconds, by the token's hash, in two bounded caches that evict
// their oldest entry when full. An open stream's token is checked again every five
// minutes.
//
// The controller's serving certificate is issued by its own CA (see package
// controller/servingcert), published in the ConfigMap kube-system/kovs-ca, which agents
// read through kube-apiserver. Agents verify the certificate against that CA for the name
// DefaultServerName, whatever address they dial.
//
// # Generations
//
// Generations grow for as long as a node is served, across controller restarts and leader
// changes: the controller serves the compiler's generations offset by the time it started
// leading (see Rebase). An agent can therefore always compare the generation of a new
// snapshot with the one it enforces. A node's generation is the one at which its share
// last changed, so every receiver of that share is at the same one once caught up (see
// docs/networkpolicy-stream.md).
package stream
