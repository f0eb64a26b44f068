package cni

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

func quietLog() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(discard{})
	return l
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func TestStaleSocketIsReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cni.sock")
	staleSocket(t, path)
	srv, err := NewServer(path, &fakeHandler{}, quietLog())
	if err != nil {
		t.Fatalf("NewServer over a stale socket: %v", err)
	}
	defer func() { _ = srv.Close() }()
	go func() { _ = srv.Serve(context.Background()) }()
	if err := NewClient(path).Status(context.Background()); err != nil {
		t.Errorf("Status: %v", err)
	}
}

func TestServedSocketIsNotTaken(t *testing.T) {
	_, path := serve(t, &fakeHandler{})
	_, err := NewServer(path, &fakeHandler{}, quietLog())
	if err == nil || !strings.Contains(err.Error(), "another process serves") {
		t.Fatalf("second NewServer = %v, want an error saying the socket is served", err)
	}
	if err := NewClient(path).Status(context.Background()); err != nil {
		t.Errorf("the first server stopped answering: %v", err)
	}
}

func TestNotASocketIsNotTaken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cni.sock")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewServer(path, &fakeHandler{}, quietLog()); err == nil {
		t.Fatal("NewServer replaced a regular file")
	}
}

func TestServeStopsAndRemovesSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cni.sock")
	started := make(chan struct{})
	h := &fakeHandler{add: func(ctx context.Context, _ AddRequest) (*PodNetworkConfig, error) {
		close(started)
		<-ctx.Done()
		return nil, Errorf(CodeTryAgainLater, "kovs-agent is stopping: %w", ctx.Err())
	}}
	srv, err := NewServer(path, h, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	answered := make(chan error, 1)
	go func() {
		_, err := NewClient(path).Add(context.Background(), testAdd())
		answered <- err
	}()
	<-started
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its context was canceled")
	}
	if err := <-answered; AsError(err).Code != CodeTryAgainLater || !strings.Contains(err.Error(), "stopping") {
		t.Errorf("request in flight got %v, want the handler's try-again answer", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket still there after Serve returned: %v", err)
	}
}

func TestCloseLeavesAnotherServersSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cni.sock")
	old, err := NewServer(path, &fakeHandler{}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	// The old server stops accepting without removing its socket (a crash), a new one
	// takes the path, then the old one's Close runs late.
	_ = old.ln.Close()
	newer, err := NewServer(path, &fakeHandler{}, quietLog())
	if err != nil {
		t.Fatalf("NewServer after the old one stopped: %v", err)
	}
	defer func() { _ = newer.Close() }()
	if err := old.Close(); err != nil {
		t.Errorf("old Close: %v", err)
	}
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("old Close removed the new server's socket: %v", err)
	}
}
