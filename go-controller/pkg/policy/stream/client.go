package stream

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// Node is the agent's node: the share it asks for.
	Node string
	// Address is the controller's host:port.
	Address string
	// ServerName is the name the controller's certificate is verified for (default
	// DefaultServerName), whatever Address is.
	ServerName string
	// Token returns the bearer token; it is called for every connection, so a rotated
	// token file is picked up on the next reconnect.
	Token func() (string, error)
	// RootCAs returns the CAs the controller's certificate must chain to; it is called
	// for every connection, so a new CA is picked up on the next reconnect.
	RootCAs func(ctx context.Context) (*x509.CertPool, error)
	// Dial dials the controller (default: a net.Dialer).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// MinBackoff and MaxBackoff bound the wait between failed connections (0.5 s, 30 s).
	MinBackoff, MaxBackoff time.Duration
	// IdleTimeout ends a connection that carried nothing for this long (default 45 s:
	// three keepalive intervals).
	IdleTimeout time.Duration
	// ReportPoll is how often Sink.Realized is read (default 250 ms) and ReportRefresh
	// the longest time between two reports (default 30 s).
	ReportPoll, ReportRefresh time.Duration
	// Leader, if set, follows which controller replica leads: a connection begun under
	// one leader ends as soon as another takes over, and the client reconnects at once.
	// Without it, a hung leader's connection (open, silent) ends only at IdleTimeout.
	Leader Leader
}

// RealizedNotifier is implemented by a Sink that signals when Realized changes: the
// client then reports at once instead of polling.
type RealizedNotifier interface {
	RealizedChanged() <-chan struct{}
}

// Client follows a node's policy stream into a policy.Sink and reports what the sink
// realized. It implements the agent's policy feed.
type Client struct {
	cfg ClientConfig
	log *log.Entry
}

// NewClient checks cfg and returns a client.
func NewClient(cfg ClientConfig) (*Client, error) {
	switch {
	case cfg.Node == "":
		return nil, errors.New("policy stream client: no node name")
	case cfg.Address == "":
		return nil, errors.New("policy stream client: no controller address")
	case cfg.Token == nil || cfg.RootCAs == nil:
		return nil, errors.New("policy stream client: a token and the controller's CA are required")
	}
	if _, _, err := net.SplitHostPort(cfg.Address); err != nil {
		return nil, fmt.Errorf("controller address %q: %w", cfg.Address, err)
	}
	if cfg.ServerName == "" {
		cfg.ServerName = DefaultServerName
	}
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	cfg.MinBackoff = orDefault(cfg.MinBackoff, 500*time.Millisecond)
	cfg.MaxBackoff = orDefault(cfg.MaxBackoff, 30*time.Second)
	cfg.IdleTimeout = orDefault(cfg.IdleTimeout, 45*time.Second)
	cfg.ReportPoll = orDefault(cfg.ReportPoll, 250*time.Millisecond)
	cfg.ReportRefresh = orDefault(cfg.ReportRefresh, 30*time.Second)
	return &Client{cfg: cfg, log: log.WithField("node", cfg.Node).WithField("controller", cfg.Address)}, nil
}

// errResync marks a session that ended because the agent needs a fresh snapshot: the
// client reconnects at once.
var errResync = errors.New("a fresh snapshot is needed")

// leaderChangedError ends a session begun under another leader: the controller at its
// other end no longer leads (a hung one keeps the connection open and sends nothing), so
// the client reconnects at once, to the new leader.
type leaderChangedError struct{ from, to string }

func (e *leaderChangedError) Error() string {
	return fmt.Sprintf("kovs-controller's leader changed from %s to %s", e.from, e.to)
}

// followLeader ends the session (end) once leader names a replica other than the one
// that led when it began; it returns when ctx ends. A leader unknown at first (or a
// Lease released on the way) is not a change: the first replica named takes its place.
func followLeader(ctx context.Context, leader Leader, end context.CancelCauseFunc) {
	began, changed := leader.Leader()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		var now string
		now, changed = leader.Leader()
		switch {
		case now == "" || now == began:
		case began == "":
			began = now
		default:
			end(&leaderChangedError{from: began, to: now})
			return
		}
	}
}

// Run follows the stream until ctx ends, reconnecting after every failure.
func (c *Client) Run(ctx context.Context, sink policy.Sink) error {
	wait := c.cfg.MinBackoff
	for ctx.Err() == nil {
		snapshot, err := c.session(ctx, sink)
		if ctx.Err() != nil {
			break
		}
		var changed *leaderChangedError
		switch {
		case errors.Is(err, errResync):
			c.log.WithError(err).Info("policy stream: reconnecting for a fresh snapshot")
			wait = c.cfg.MinBackoff
			continue
		case errors.As(err, &changed):
			c.log.WithError(err).Info("policy stream: reconnecting to the new leader")
			wait = c.cfg.MinBackoff
			continue
		case snapshot:
			// The connection worked: the next failure starts the backoff again.
			wait = c.cfg.MinBackoff
		}
		delay := wait/2 + rand.N(wait/2+1)
		c.log.WithError(err).WithField("retryIn", delay.Round(time.Millisecond)).Warn("policy stream: disconnected")
		var leaderChanged <-chan struct{} // nil without a Leader: never ready
		if c.cfg.Leader != nil {
			_, leaderChanged = c.cfg.Leader.Leader()
		}
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		case <-leaderChanged:
			// A failover: the new leader is the one to reach, and the backoff grown while
			// no replica led (up to MaxBackoff) would only delay it. If it does not
			// listen yet, the backoff starts again from its minimum.
			c.log.Info("policy stream: kovs-controller's leader changed while waiting to reconnect; reconnecting now")
			wait = c.cfg.MinBackoff
			continue
		}
		wait = min(2*wait, c.cfg.MaxBackoff)
	}
	return nil
}

// conn is one connection to the controller.
type conn struct {
	c      *Client
	http   *http.Client
	token  string
	cancel context.CancelCauseFunc
}

// session runs one connection: the stream into the sink, and the reports. It returns
// whether a snapshot was delivered, and why the connection ended.
func (c *Client) session(ctx context.Context, sink policy.Sink) (bool, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if c.cfg.Leader != nil {
		go followLeader(ctx, c.cfg.Leader, cancel)
	}
	cn, err := c.dial(ctx, cancel)
	if err != nil {
		return false, err
	}
	defer cn.http.CloseIdleConnections()
	resp, err := cn.do(ctx, http.MethodGet, PolicyPath(c.cfg.Node), nil)
	if err != nil {
		if cause := context.Cause(ctx); ctx.Err() != nil && cause != nil {
			err = cause // the leader changed while connecting
		}
		return false, err
	}
	defer resp.Body.Close()
	if err := statusError(resp); err != nil {
		return false, err
	}
	err = checkProtocol(resp)
	if n, ok := sink.(ControllerNotifier); ok {
		var tooOld *ControllerTooOldError
		if err == nil || errors.As(err, &tooOld) {
			n.ControllerCompatible(err)
		}
	}
	if err != nil {
		return false, err
	}
	rs := newReceiver(c.cfg.Node, sink)
	rep := newReporter(cn, sink, rs)
	reporting := make(chan struct{})
	go func() {
		defer close(reporting)
		rep.run(ctx)
	}()
	err = cn.receive(ctx, resp.Body, rs, rep.kick)
	if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
		err = cause
	}
	cancel(nil)
	<-reporting // no request may outlive the connection's transport
	return rs.snapshot(), err
}

// dial prepares a connection with the current token and CA.
func (c *Client) dial(ctx context.Context, cancel context.CancelCauseFunc) (*conn, error) {
	token, err := c.cfg.Token()
	if err != nil {
		return nil, fmt.Errorf("read the agent's token: %w", err)
	}
	roots, err := c.cfg.RootCAs(ctx)
	if err != nil {
		return nil, fmt.Errorf("load the controller's CA: %w", err)
	}
	transport := &http.Transport{
		DialContext:         c.cfg.Dial,
		TLSClientConfig:     &tls.Config{RootCAs: roots, ServerName: c.cfg.ServerName, MinVersion: tls.VersionTLS13},
		ForceAttemptHTTP2:   true,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 1,
		Proxy:               nil,
	}
	return &conn{c: c, http: &http.Client{Transport: transport}, token: token, cancel: cancel}, nil
}

func (cn *conn) do(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	u := url.URL{Scheme: "https", Host: cn.c.cfg.Address, Path: path}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+cn.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := cn.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return resp, nil
}

// StatusError is a refusal by the controller.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("controller answered %d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}

func statusError(resp *http.Response) error {
	if resp.StatusCode/100 == 2 {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return &StatusError{Code: resp.StatusCode, Message: strings.TrimSpace(string(b))}
}

// receive decodes the stream into the receiver until it fails or ctx ends. A connection
// that carries nothing for IdleTimeout is dropped.
func (cn *conn) receive(ctx context.Context, body io.Reader, rs *receiver, delivered func()) error {
	idle := time.AfterFunc(cn.c.cfg.IdleTimeout, func() {
		cn.cancel(fmt.Errorf("nothing received for %s", cn.c.cfg.IdleTimeout))
	})
	defer idle.Stop()
	dec := json.NewDecoder(body)
	for {
		var m Message
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("the controller closed the stream")
			}
			return fmt.Errorf("read the policy stream: %w", err)
		}
		idle.Reset(cn.c.cfg.IdleTimeout)
		if err := rs.deliver(m); err != nil {
			return err
		}
		if m.Type != MessageKeepalive {
			delivered()
		}
	}
}
