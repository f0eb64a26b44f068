package stream

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
	"github.com/kovs-net/kovs/go-controller/pkg/serving"
)

// ServerConfig configures a Server.
type ServerConfig struct {
	Source        Source
	Authenticator Authenticator
	Authorizer    Authorizer
	// Reports receives realized generations (optional).
	Reports Reports
	// KeepaliveInterval is how long the stream may stay quiet (default 15 s).
	KeepaliveInterval time.Duration
	// WriteTimeout bounds the write of one message to a slow agent (default 30 s).
	WriteTimeout time.Duration
	// MaxStreamsPerNode bounds the concurrent streams of one node (default 2: an agent
	// that reconnects while its old connection is not yet known dead); the oldest stream
	// is closed to make room.
	MaxStreamsPerNode int
	// ReauthInterval is how often an open stream's credential is checked again (default
	// 5 min): a stream dies with its token (expired, revoked, or its Node or Pod deleted).
	ReauthInterval time.Duration
	// Sent, if set, is told of every snapshot and delta once its write to a node's
	// stream has returned (the scale harness's clock of the controller's part:
	// --debug-receipts).
	Sent func(node string, generation uint64)
}

// Server serves each node's share to the node's agent.
type Server struct {
	cfg ServerConfig
	mu  sync.Mutex
	// streams are the open streams per node, oldest first.
	streams map[string][]*openStream
	// sent is the last generation sent to each node, on any stream.
	sent map[string]uint64
	// sets are the address lists' JSON, encoded once for every stream that sends them.
	sets *setEncodings
}

type openStream struct{ cancel context.CancelFunc }

// NewServer returns a server for cfg.
func NewServer(cfg ServerConfig) *Server {
	if cfg.KeepaliveInterval <= 0 {
		cfg.KeepaliveInterval = 15 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	if cfg.MaxStreamsPerNode <= 0 {
		cfg.MaxStreamsPerNode = 2
	}
	if cfg.ReauthInterval <= 0 {
		cfg.ReauthInterval = DefaultReviewTTL
	}
	return &Server{cfg: cfg, streams: map[string][]*openStream{}, sent: map[string]uint64{}, sets: newSetEncodings()}
}

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/nodes/{node}/policy", s.servePolicy)
	mux.HandleFunc("POST /v1/nodes/{node}/realized", s.serveRealized)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	return mux
}

// Serve serves HTTPS on ln until ctx ends; then it closes every stream.
func (s *Server) Serve(ctx context.Context, ln net.Listener, tlsConfig *tls.Config) error {
	tlsConfig = tlsConfig.Clone()
	tlsConfig.MinVersion = tls.VersionTLS13
	errorLog := log.WithField("component", "policy-stream").WriterLevel(log.DebugLevel)
	defer errorLog.Close()
	srv := &http.Server{
		Handler:           s.Handler(),
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          stdlog.New(errorLog, "", 0), // TLS handshake failures and the like
	}
	errc := make(chan error, 1)
	// Streams live for hours: no read or write timeout (keepalives and re-authentication
	// bound them); the connection count is bounded.
	ln = serving.Limit(ln, serving.StreamLimits(), log.WithField("component", "policy-stream"))
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		return fmt.Errorf("policy stream server: %w", err)
	case <-ctx.Done():
	}
	// The streams end with ctx (their requests' base context); give them a moment to
	// say so, then close what is left.
	shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		_ = srv.Close()
	}
	<-errc
	return nil
}

// check authenticates token and authorizes its identity for node.
func (s *Server) check(ctx context.Context, token, node string) (Identity, error) {
	return s.checkWith(ctx, s.cfg.Authenticator.Authenticate, token, node)
}

// recheck is check for an open stream: without cached answers, when the Authenticator can.
func (s *Server) recheck(ctx context.Context, token, node string) (Identity, error) {
	if re, ok := s.cfg.Authenticator.(Reauthenticator); ok {
		return s.checkWith(ctx, re.Reauthenticate, token, node)
	}
	return s.check(ctx, token, node)
}

func (s *Server) checkWith(ctx context.Context, authenticate func(context.Context, string) (Identity, error), token, node string) (Identity, error) {
	id, err := authenticate(ctx, token)
	if err != nil {
		return id, err
	}
	return id, s.cfg.Authorizer.Authorize(id, node)
}

// authorize authenticates the request and checks that it may act for node. It writes
// the refusal and returns false when not.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, node string) bool {
	logger := log.WithField("node", node).WithField("remote", r.RemoteAddr)
	token, ok := bearerToken(r.Header.Get("Authorization"))
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="kovs-controller"`)
		http.Error(w, "a bearer token is required", http.StatusUnauthorized)
		logger.Debug("policy stream: request without a token refused")
		return false
	}
	id, err := s.check(r.Context(), token, node)
	switch {
	case err == nil:
		return true
	case errors.Is(err, ErrForbidden):
		http.Error(w, err.Error(), http.StatusForbidden)
		logger.WithError(err).WithField("user", id.User).Warn("policy stream: request refused")
		return false
	case errors.Is(err, ErrUnauthenticated):
		w.Header().Set("WWW-Authenticate", `Bearer realm="kovs-controller", error="invalid_token"`)
		http.Error(w, "invalid token", http.StatusUnauthorized)
		logger.WithError(err).Info("policy stream: invalid token refused")
		return false
	default:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "cannot authenticate now, retry", http.StatusServiceUnavailable)
		logger.WithError(err).Warn("policy stream: cannot authenticate")
		return false
	}
}

// servePolicy streams a node's share: the snapshot, then deltas and keepalives.
func (s *Server) servePolicy(w http.ResponseWriter, r *http.Request) {
	node := r.PathValue("node")
	if !s.authorize(w, r, node) {
		return
	}
	ctx, release := s.open(r.Context(), node)
	defer release()
	logger := log.WithField("node", node).WithField("remote", r.RemoteAddr)
	st := &streamWriter{w: w, rc: http.NewResponseController(w), enc: newMessageWriter(w, s.sets), timeout: s.cfg.WriteTimeout}
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set(ProtocolHeader, strconv.Itoa(ProtocolVersion))
	w.WriteHeader(http.StatusOK)
	if err := st.rc.Flush(); err != nil {
		return
	}
	share, deltas, cancel, err := s.watch(ctx, node, st)
	if err != nil {
		logger.WithError(err).Debug("policy stream ended before the snapshot")
		return
	}
	defer cancel()
	logger.WithField("generation", share.Generation).Info("policy stream: sending snapshot")
	err = s.send(st, node, Message{Type: MessageSnapshot, Generation: share.Generation, Snapshot: &share})
	token, _ := bearerToken(r.Header.Get("Authorization"))
	reauth := time.NewTicker(s.cfg.ReauthInterval)
	defer reauth.Stop()
	for err == nil {
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-reauth.C:
			if _, aerr := s.recheck(ctx, token, node); aerr != nil && (errors.Is(aerr, ErrUnauthenticated) || errors.Is(aerr, ErrForbidden)) {
				err = fmt.Errorf("credential no longer valid: %w", aerr)
			}
		case d, ok := <-deltas:
			if !ok {
				err = errors.New("policy source stopped")
				break
			}
			err = s.send(st, node, Message{Type: MessageDelta, Generation: d.Generation, Delta: &d})
		case <-st.quiet(s.cfg.KeepaliveInterval):
			err = st.write(Message{Type: MessageKeepalive, Generation: st.generation})
		}
	}
	logger.WithError(err).Info("policy stream closed")
}

// watch subscribes to the node's share, writing keepalives while the source is not ready.
func (s *Server) watch(ctx context.Context, node string, st *streamWriter) (policy.NodeShare, <-chan policy.Delta, func(), error) {
	type result struct {
		share  policy.NodeShare
		deltas <-chan policy.Delta
		cancel func()
		err    error
	}
	ch := make(chan result, 1)
	go func() {
		share, deltas, cancel, err := s.cfg.Source.Watch(ctx, node)
		ch <- result{share, deltas, cancel, err}
	}()
	for {
		select {
		case res := <-ch:
			return res.share, res.deltas, res.cancel, res.err
		case <-st.quiet(s.cfg.KeepaliveInterval):
			if err := st.write(Message{Type: MessageKeepalive}); err != nil {
				go func() {
					if res := <-ch; res.err == nil {
						res.cancel()
					}
				}()
				return policy.NodeShare{}, nil, nil, err
			}
		}
	}
}

// send writes a snapshot or delta and records its generation as sent to node.
func (s *Server) send(st *streamWriter, node string, m Message) error {
	if err := st.write(m); err != nil {
		return err
	}
	s.mu.Lock()
	s.sent[node] = max(s.sent[node], m.Generation)
	s.mu.Unlock()
	if s.cfg.Sent != nil {
		s.cfg.Sent(node, m.Generation)
	}
	return nil
}

// open registers a stream of node, closing the oldest if the node has too many. The
// returned context ends when the stream is closed that way or the request ends.
func (s *Server) open(parent context.Context, node string) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	me := &openStream{cancel: cancel}
	s.mu.Lock()
	list := append(s.streams[node], me)
	for len(list) > s.cfg.MaxStreamsPerNode {
		log.WithField("node", node).Info("policy stream: closing the node's oldest stream for a new one")
		list[0].cancel()
		list = list[1:]
	}
	s.streams[node] = list
	s.mu.Unlock()
	return ctx, func() {
		cancel()
		s.mu.Lock()
		defer s.mu.Unlock()
		list := s.streams[node]
		for i, o := range list {
			if o == me {
				list = append(list[:i:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(s.streams, node)
		} else {
			s.streams[node] = list
		}
	}
}

// serveRealized takes an agent's realized generation. A generation never sent to the
// node is refused (409): it would claim what the node cannot have.
func (s *Server) serveRealized(w http.ResponseWriter, r *http.Request) {
	node := r.PathValue("node")
	if !s.authorize(w, r, node) {
		return
	}
	var rep Realized
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<10)).Decode(&rep); err != nil {
		http.Error(w, "body must be {\"generation\": N}", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	sent := s.sent[node]
	s.mu.Unlock()
	if rep.Generation > sent {
		http.Error(w, fmt.Sprintf("generation %d was never sent to node %s (last sent %d)", rep.Generation, node, sent), http.StatusConflict)
		return
	}
	if s.cfg.Reports != nil {
		s.cfg.Reports.Realized(node, rep.Generation)
	}
	log.WithField("node", node).WithField("generation", rep.Generation).Debug("policy realized")
	w.WriteHeader(http.StatusNoContent)
}

// streamWriter writes the messages of one stream, each flushed and bounded in time.
type streamWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	enc     *messageWriter
	timeout time.Duration
	// generation is the last generation written; last when the last message was.
	generation uint64
	last       time.Time
	timer      *time.Timer
}

func (st *streamWriter) write(m Message) error {
	_ = st.rc.SetWriteDeadline(time.Now().Add(st.timeout))
	if err := st.enc.write(m); err != nil {
		return err
	}
	if err := st.rc.Flush(); err != nil {
		return err
	}
	if m.Type != MessageKeepalive {
		st.generation = m.Generation
	}
	st.last = time.Now()
	return nil
}

// quiet returns a channel that fires when the stream will have been quiet for d.
func (st *streamWriter) quiet(d time.Duration) <-chan time.Time {
	wait := d
	if !st.last.IsZero() {
		wait = time.Until(st.last.Add(d))
	}
	if st.timer == nil {
		st.timer = time.NewTimer(wait)
	} else {
		st.timer.Reset(wait)
	}
	return st.timer.C
}
