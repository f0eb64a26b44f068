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
	OpAdd    = "add"
	OpDetach = "detach"
	OpCheck  = "check"
	OpGC     = "gc"
	OpStatus = "status"
)

// Call is one request the fake agent received.
type Call struct {
	Op     string
	Pod    cni.PodRef
	Add    cni.AddRequest    // add
	Attach cni.AttachRequest // check
	Detach cni.DetachRequest // detach
	Valid  []cni.Attachment  // gc
}

// Agent is a cni.Handler that answers from what the test set and records every call.
// It is safe for concurrent use.
type Agent struct {
	mu       sync.Mutex
	networks map[cni.PodRef]*cni.PodNetworkConfig
	errs     map[string]error
	onAdd    func(cni.AddRequest) error
	calls    []Call
}

var _ cni.Handler = (*Agent)(nil)

// NewAgent returns an agent that knows no pod.
func NewAgent() *Agent {
	return &Agent{networks: map[cni.PodRef]*cni.PodNetworkConfig{}, errs: map[string]error{}}
}

// SetPodNetwork makes Add answer cfg for pod.
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

// OnAdd runs check on each Add before it answers; its error is the answer. Tests use it
// to look at the node while the plugin waits for the agent.
func (a *Agent) OnAdd(check func(cni.AddRequest) error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.onAdd = check
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

// Add records req, runs the OnAdd check and answers the config set for the pod, or
// CodeTryAgainLater when there is none.
func (a *Agent) Add(_ context.Context, req cni.AddRequest) (*cni.PodNetworkConfig, error) {
	if err := a.record(Call{Op: OpAdd, Pod: req.Pod, Add: req}); err != nil {
		return nil, err
	}
	a.mu.Lock()
	check := a.onAdd
	cfg, ok := a.networks[req.Pod]
	a.mu.Unlock()
	if check != nil {
		if err := check(req); err != nil {
			return nil, err
		}
	}
	if !ok {
		return nil, cni.Errorf(cni.CodeTryAgainLater, "no network set for pod %s", req.Pod)
	}
	c := *cfg
	return &c, nil
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
