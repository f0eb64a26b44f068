package cni

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// shutdownGrace bounds how long Serve waits, once its context is done, for requests in
// flight to answer (their contexts are canceled first, so handlers return promptly).
const shutdownGrace = 5 * time.Second

// Server serves a Handler to kovs-cni on a unix socket only root can use: the socket's
// directory is created 0700 and the socket is 0600 from the moment it is reachable.
type Server struct {
	path    string
	handler Handler
	log     logrus.FieldLogger
	ln      *net.UnixListener
	socket  os.FileInfo
	uid     int // the effective uid it was created with: the one peer besides root it serves

	closeOnce sync.Once
	closeErr  error
}

// NewServer listens on socketPath and returns a server of handler; call Serve to answer
// requests. It fails when another process still serves socketPath; a stale socket is
// replaced.
func NewServer(socketPath string, handler Handler, log logrus.FieldLogger) (*Server, error) {
	ln, socket, err := listenSocket(socketPath)
	if err != nil {
		return nil, fmt.Errorf("CNI server: %w", err)
	}
	return &Server{path: socketPath, handler: handler, log: log, ln: ln, socket: socket, uid: os.Geteuid()}, nil
}

// SocketPath returns the path kovs-cni must be configured with ("socket" in the
// network config).
func (s *Server) SocketPath() string { return s.path }

// Serve answers requests until ctx is done or Close is called. When ctx is done it stops
// accepting, cancels the contexts of the requests in flight, waits up to 5s for their
// answers and removes the socket. It returns nil then, or the error that stopped it.
func (s *Server) Serve(ctx context.Context) error {
	srv := &http.Server{
		Handler:           s.routes(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnContext:       withPeer,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(rootListener{UnixListener: s.ln, uid: s.uid, log: s.log}) }()
	select {
	case err := <-served:
		closeErr := s.Close()
		if errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) {
			return closeErr
		}
		return errors.Join(fmt.Errorf("CNI server: %w", err), closeErr)
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
		defer cancel()
		err := srv.Shutdown(shutdownCtx)
		<-served
		if err != nil {
			err = fmt.Errorf("CNI server shutdown: %w", err)
		}
		return errors.Join(err, s.Close())
	}
}

// Close stops accepting connections and removes the socket (if it is still this
// server's). Requests in flight are cut; prefer canceling Serve's context.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		if err := s.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			s.closeErr = fmt.Errorf("close CNI socket: %w", err)
		}
		s.closeErr = errors.Join(s.closeErr, removeSocket(s.path, s.socket))
	})
	return s.closeErr
}
