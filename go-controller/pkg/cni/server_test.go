package cni

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// fakeHandler answers with its fields and records what it was asked.
type fakeHandler struct {
	add func(context.Context, AddRequest) (*PodNetworkConfig, error)
	err error // answer of the other methods

	mu    sync.Mutex
	calls []any
}

func (h *fakeHandler) record(req any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, req)
}

func (h *fakeHandler) recorded() []any {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]any(nil), h.calls...)
}

func (h *fakeHandler) Add(ctx context.Context, req AddRequest) (*PodNetworkConfig, error) {
	h.record(req)
	if h.add == nil {
		return nil, h.err
	}
	return h.add(ctx, req)
}

func (h *fakeHandler) Detach(_ context.Context, req DetachRequest) error {
	h.record(req)
	return h.err
}

func (h *fakeHandler) Check(_ context.Context, req AttachRequest) error {
	h.record(req)
	return h.err
}

func (h *fakeHandler) GC(_ context.Context, valid []Attachment) error {
	h.record(valid)
	return h.err
}

func (h *fakeHandler) Status(context.Context) error {
	h.record("status")
	return h.err
}

var testPod = PodRef{Namespace: "default", Name: "web", UID: "0b8f6a3c-uid"}

func testConfig() *PodNetworkConfig {
	return &PodNetworkConfig{
		IPs: []IPConfig{
			{Address: "10.244.1.5/24", Gateway: "10.244.1.1"},
			{Address: "fd00:10:244:1::5/64", Gateway: "fd00:10:244:1::1"},
		},
		MAC:                      "0a:58:0a:f4:01:05",
		Routes:                   []RouteConfig{{Dst: "10.96.0.0/12"}},
		MTU:                      1450,
		DisableTxChecksumOffload: true,
	}
}

func testAdd() AddRequest {
	a := testAttach()
	return AddRequest{ContainerID: a.ContainerID, Netns: a.Netns, IfName: a.IfName, Pod: a.Pod, HostIfName: a.HostIfName}
}

func testAttach() AttachRequest {
	return AttachRequest{
		ContainerID: "4f1c2a9b7e3d0c5a",
		Netns:       "/var/run/netns/pod",
		IfName:      "eth0",
		Pod:         testPod,
		HostIfName:  "kv4f1c2a9b7e3d",
		MAC:         "0a:58:0a:f4:01:05",
		IPs:         []IPConfig{{Address: "10.244.1.5/24", Gateway: "10.244.1.1"}},
	}
}

// serve starts a server of h on a socket in a fresh directory and returns its client and
// socket path; the server stops when the test ends.
func serve(t *testing.T, h Handler) (*Client, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run", "cni.sock")
	log := logrus.New()
	log.SetOutput(testWriter{t})
	srv, err := NewServer(path, h, log)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return NewClient(path), path
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func TestRoundTrip(t *testing.T) {
	h := &fakeHandler{add: func(context.Context, AddRequest) (*PodNetworkConfig, error) { return testConfig(), nil }}
	c, _ := serve(t, h)
	ctx := context.Background()

	cfg, err := c.Add(ctx, testAdd())
	if err != nil {
		t.Fatalf("Add: %v", err)
	}
	if !reflect.DeepEqual(cfg, testConfig()) {
		t.Errorf("Add = %+v, want %+v", cfg, testConfig())
	}
	detach := DetachRequest{ContainerID: "4f1c2a9b7e3d0c5a", IfName: "eth0"}
	valid := []Attachment{{ContainerID: "4f1c2a9b7e3d0c5a", IfName: "eth0"}}
	for name, call := range map[string]func() error{
		"detach": func() error { return c.Detach(ctx, detach) },
		"check":  func() error { return c.Check(ctx, testAttach()) },
		"gc":     func() error { return c.GC(ctx, valid) },
		"status": func() error { return c.Status(ctx) },
	} {
		if err := call(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	got := h.recorded()
	for _, want := range []any{testAdd(), testAttach(), detach, valid, "status"} {
		if !containsDeep(got, want) {
			t.Errorf("handler was not called with %+v; calls: %+v", want, got)
		}
	}
}

func containsDeep(list []any, v any) bool {
	for _, x := range list {
		if reflect.DeepEqual(x, v) {
			return true
		}
	}
	return false
}

func TestSocketIsRootOnly(t *testing.T) {
	_, path := serve(t, &fakeHandler{})
	sock, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if sock.Mode().Type() != os.ModeSocket || sock.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, want a socket with 0600", sock.Mode())
	}
	dir, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if dir.Mode().Perm() != 0o700 {
		t.Errorf("socket directory mode = %v, want 0700", dir.Mode().Perm())
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("socket directory holds %d entries, want only the socket", len(entries))
	}
}

func TestErrorsCrossTheSocket(t *testing.T) {
	for _, tc := range []struct {
		name        string
		err         error
		wantCode    Code
		wantMsg     string
		wantDetails string
	}{{
		name:        "coded",
		err:         Errorf(CodeTryAgainLater, "NetworkPolicy for pod %s has not arrived", testPod).WithDetails("is kovs-controller running?"),
		wantCode:    CodeTryAgainLater,
		wantMsg:     "NetworkPolicy for pod default/web has not arrived",
		wantDetails: "is kovs-controller running?",
	}, {
		name:     "wrapped coded",
		err:      errors.Join(Errorf(CodeInvalidConfig, "pod is host-network")),
		wantCode: CodeInvalidConfig,
		wantMsg:  "pod is host-network",
	}, {
		name:     "plain",
		err:      errors.New("ovsdb transaction failed"),
		wantCode: CodeInternal,
		wantMsg:  "ovsdb transaction failed",
	}, {
		name:     "deadline",
		err:      context.DeadlineExceeded,
		wantCode: CodeTryAgainLater,
		wantMsg:  "context deadline exceeded",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := serve(t, &fakeHandler{err: tc.err})
			_, err := c.Add(context.Background(), testAdd())
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Add error = %v (%T), want *Error", err, err)
			}
			if e.Code != tc.wantCode || e.Msg != tc.wantMsg || e.Details != tc.wantDetails {
				t.Errorf("Add error = %+v, want code %d msg %q details %q", e, tc.wantCode, tc.wantMsg, tc.wantDetails)
			}
		})
	}
}

func TestInvalidRequestsNeverReachTheHandler(t *testing.T) {
	h := &fakeHandler{}
	c, _ := serve(t, h)
	bad := testAdd()
	bad.HostIfName = ""
	_, err := c.Add(context.Background(), bad)
	if e := AsError(err); e.Code != CodeInvalidConfig || !strings.Contains(e.Msg, "hostIfName") {
		t.Errorf("Add without hostIfName = %v, want code 7 naming hostIfName", err)
	}
	if err := c.Detach(context.Background(), DetachRequest{IfName: "eth0"}); AsError(err).Code != CodeInvalidConfig {
		t.Errorf("Detach without containerID = %v, want code 7", err)
	}
	if calls := h.recorded(); len(calls) != 0 {
		t.Errorf("handler called with %+v", calls)
	}
}

func TestUnusableNetworkConfigIsAnError(t *testing.T) {
	h := &fakeHandler{add: func(context.Context, AddRequest) (*PodNetworkConfig, error) {
		cfg := testConfig()
		cfg.MTU = 0
		return cfg, nil
	}}
	c, _ := serve(t, h)
	_, err := c.Add(context.Background(), testAdd())
	if e := AsError(err); e.Code != CodeInternal || !strings.Contains(e.Msg, "MTU 0") {
		t.Errorf("Add = %v, want code 999 about the MTU", err)
	}
}

func TestHandlerPanicIsAnAnswer(t *testing.T) {
	h := &fakeHandler{add: func(context.Context, AddRequest) (*PodNetworkConfig, error) { panic("boom") }}
	c, _ := serve(t, h)
	_, err := c.Add(context.Background(), testAdd())
	if e := AsError(err); e.Code != CodeInternal || !strings.Contains(e.Msg, "panic: boom") {
		t.Errorf("Add = %v, want code 999 with the panic", err)
	}
}

func TestUnknownEndpoint(t *testing.T) {
	c, _ := serve(t, &fakeHandler{})
	err := c.call(context.Background(), "POST", "/v2/attach", testAttach(), nil)
	if e := AsError(err); e.Code != CodeInvalidConfig || !strings.Contains(e.Msg, "/v2/attach") {
		t.Errorf("POST /v2/attach = %v, want code 7 naming the path", err)
	}
}

func TestAgentNotRunning(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "cni.sock")
	stale := filepath.Join(t.TempDir(), "cni.sock")
	staleSocket(t, stale)
	for name, path := range map[string]string{"missing socket": missing, "stale socket": stale} {
		t.Run(name, func(t *testing.T) {
			err := NewClient(path).Status(context.Background())
			if !errors.Is(err, ErrAgentUnreachable) {
				t.Fatalf("Status = %v, want ErrAgentUnreachable", err)
			}
			e := AsError(err)
			if e.Code != CodeTryAgainLater || !strings.HasPrefix(e.Msg, "kovs-agent not running: dial unix "+path) {
				t.Errorf("Status = %+v, want code 11 and a message naming the socket", e)
			}
		})
	}
}

// staleSocket leaves a socket file nothing accepts on, as a crashed agent does.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	_ = ln.Close()
}

func TestDeadlineIsTryAgainLater(t *testing.T) {
	h := &fakeHandler{add: func(ctx context.Context, _ AddRequest) (*PodNetworkConfig, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	c, _ := serve(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Add(ctx, testAdd())
	if e := AsError(err); e.Code != CodeTryAgainLater || errors.Is(err, ErrAgentUnreachable) {
		t.Errorf("Add past its deadline = %v, want code 11 (and not unreachable)", err)
	}
}
