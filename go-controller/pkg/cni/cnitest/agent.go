// Package cnitest serves a fake kovs-agent on a unix socket, for tests of kovs-cni (and
// of anything else that speaks the cni protocol).
package cnitest

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
)

// Operations, as Agent records them and Fail takes them.
const (
	OpPodNetwork = "pod-network"
	OpAttach     = "attach"
	OpDetach     = "detach"
	OpCheck      = "check"
	OpGC         = "gc"
	OpStatus     = "status"
)

// Call is one request the fake agent received.
type Call struct {
	Op     string
	Pod    cni.PodRef
	Attach cni.AttachRequest // attach and check
	Detach cni.DetachRequest // detach
	Valid  []cni.Attachment  // gc
}

// Agent is a cni.Handler that answers from what the test set and records every call.
// It is safe for concurrent use.
type Agent struct {
	mu       sync.Mutex
	networks map[cni.PodRef]*cni.PodNetworkConfig
	errs     map[string]error
	onAttach func(cni.AttachRequest) error
	calls    []Call
}

var _ cni.Handler = (*Agent)(nil)

// NewAgent returns an agent that knows no pod.
func NewAgent() *Agent {
	return &Agent{networks: map[cni.PodRef]*cni.PodNetworkConfig{}, errs: map[string]error{}}
}

// SetPodNetwork makes PodNetwork answer cfg for pod.
func (a *Agent) SetPodNetwork(pod cni.PodRef, cfg *cni.PodNetworkConfig) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.networks[pod] = cfg
}

// Fail makes op answer err (nil: succeed again).
func (a *Agent) Fail(op string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.errs[op] = err
}

// OnAttach runs check on each Attach before it answers; its error is the answer. Tests
// use it to look at the node while the plugin waits for the agent.
func (a *Agent) OnAttach(check func(cni.AttachRequest) error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.onAttach = check
}

// Calls returns the calls of op received so far (every call with op "").
func (a *Agent) Calls(op string) []Call {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Call
	for _, c := range a.calls {
		if op == "" || c.Op == op {
			out = append(out, c)
		}
	}
	return out
}

// record notes c and returns the error set for its op.
func (a *Agent) record(c Call) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, c)
	return a.errs[c.Op]
}

// PodNetwork answers the config set for pod, or CodeTryAgainLater like the real agent
// when there is none.
func (a *Agent) PodNetwork(_ context.Context, pod cni.PodRef) (*cni.PodNetworkConfig, error) {
	if err := a.record(Call{Op: OpPodNetwork, Pod: pod}); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	cfg, ok := a.networks[pod]
	if !ok {
		return nil, cni.Errorf(cni.CodeTryAgainLater, "no address allocated yet for pod %s", pod)
	}
	c := *cfg
	return &c, nil
}

// Attach records req and runs the OnAttach check.
func (a *Agent) Attach(_ context.Context, req cni.AttachRequest) error {
	if err := a.record(Call{Op: OpAttach, Pod: req.Pod, Attach: req}); err != nil {
		return err
	}
	a.mu.Lock()
	check := a.onAttach
	a.mu.Unlock()
	if check != nil {
		return check(req)
	}
	return nil
}

// Detach records req.
func (a *Agent) Detach(_ context.Context, req cni.DetachRequest) error {
	return a.record(Call{Op: OpDetach, Pod: req.Pod, Detach: req})
}

// Check records req.
func (a *Agent) Check(_ context.Context, req cni.AttachRequest) error {
	return a.record(Call{Op: OpCheck, Pod: req.Pod, Attach: req})
}

// GC records valid.
func (a *Agent) GC(_ context.Context, valid []cni.Attachment) error {
	return a.record(Call{Op: OpGC, Valid: valid})
}

// Status records the call.
func (a *Agent) Status(context.Context) error {
	return a.record(Call{Op: OpStatus})
}

// Serve serves a on a socket in a fresh temporary directory until the test ends, and
// returns the socket's path.
func (a *Agent) Serve(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cni.sock")
	log := logrus.New()
	log.SetLevel(logrus.ErrorLevel)
	srv, err := cni.NewServer(path, a, log)
	if err != nil {
		t.Fatalf("serve the fake agent: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("fake agent: %v", err)
		}
	})
	return path
}
