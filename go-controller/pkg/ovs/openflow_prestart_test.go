package ovs

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestStartedProcessTakesItsInputLater(t *testing.T) {
	p, err := OSExec{}.Start(Command{Path: "sh", Args: []string{"-c", "cat; echo read >&2"}})
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := p.Finish(context.Background(), []byte("flow add table=1,actions=drop\n"))
	if err != nil || string(stdout) != "flow add table=1,actions=drop\n" || string(stderr) != "read\n" {
		t.Fatalf("Finish = %q, %q, %v; want the input echoed and \"read\"", stdout, stderr, err)
	}
}

func TestStartedProcessExitStatus(t *testing.T) {
	p, err := OSExec{}.Start(Command{Path: "sh", Args: []string{"-c", "echo bad line >&2; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	cmd := Command{Path: "sh", Stdin: []byte(strings.Repeat("x", 1<<20))} // more than a pipe holds
	_, err = finish(context.Background(), p, cmd)
	var ce *CommandError
	var exit *exec.ExitError
	if !errors.As(err, &ce) || ce.Stderr != "bad line" || !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("finish = %v, want a CommandError with stderr \"bad line\" and exit status 3", err)
	}
}

func TestStartedProcessKilledWhenContextEnds(t *testing.T) {
	p, err := OSExec{}.Start(Command{Path: "sleep", Args: []string{"60"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = finish(ctx, p, Command{Path: "sleep", Stdin: []byte("x")})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("finish = %v, want the deadline named", err)
	}
}

// startRecorder is an Exec whose Start hands out recorded processes.
type startRecorder struct {
	*fakeExec
	mu      sync.Mutex
	started []*recordedProcess
}

type recordedProcess struct {
	stdin     []byte
	finished  bool
	abandoned bool
}

func newStartRecorder() *startRecorder {
	return &startRecorder{fakeExec: newFakeExec().on("bundle", fakeAnswer{})}
}

func (s *startRecorder) Start(Command) (Started, error) {
	s.mu.Lock()
	p := &recordedProcess{}
	s.started = append(s.started, p)
	s.mu.Unlock()
	return &recordedStarted{s, p}, nil
}

type recordedStarted struct {
	s *startRecorder
	p *recordedProcess
}

func (r *recordedStarted) Finish(_ context.Context, stdin []byte) ([]byte, []byte, error) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	r.p.stdin, r.p.finished = stdin, true
	return nil, nil, nil
}

func (r *recordedStarted) Abandon() {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	r.p.abandoned = true
}

func TestBundlesGoThroughAProcessStartedAhead(t *testing.T) {
	rec := newStartRecorder()
	of, err := NewOpenFlow(OpenFlowConfig{Bridge: "br-int", Exec: rec, PrestartBundles: true})
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, of)
	if err := of.Bundle(context.Background(), []Mod{AddFlow("table=1,priority=1,actions=drop")}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, of) // the next one, for the next bundle
	if err := of.Bundle(context.Background(), []Mod{AddFlow("table=2,priority=1,actions=drop")}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, of)
	if runs := rec.ran("bundle"); len(runs) != 0 {
		t.Errorf("%d bundles ran ovs-ofctl whole, want none: a process was ready for each", len(runs))
	}
	of.Close()
	if err := of.Bundle(context.Background(), []Mod{AddFlow("table=3,priority=1,actions=drop")}); err != nil {
		t.Fatal(err)
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.started) != 3 {
		t.Fatalf("%d processes started ahead, want 3 (one at creation, one after each bundle)", len(rec.started))
	}
	for i, want := range []string{"table=1,priority=1,actions=drop", "table=2,priority=1,actions=drop"} {
		if p := rec.started[i]; !p.finished || !strings.Contains(string(p.stdin), want) {
			t.Errorf("process %d got %q (finished %v), want the bundle with %s", i, p.stdin, p.finished, want)
		}
	}
	if last := rec.started[2]; last.finished || !last.abandoned {
		t.Errorf("the process waiting at Close: finished %v, abandoned %v; want it abandoned", last.finished, last.abandoned)
	}
	if runs := rec.ran("bundle"); len(runs) != 1 || !strings.Contains(string(runs[0].Stdin), "table=3") {
		t.Errorf("after Close, bundles run ovs-ofctl whole: got %d runs, want the table=3 one", len(runs))
	}
}

func TestBundleWithoutAProcessReadyRunsWhole(t *testing.T) {
	e := newFakeExec().on("bundle", fakeAnswer{})
	of, err := NewOpenFlow(OpenFlowConfig{Bridge: "br-int", Exec: e, PrestartBundles: true})
	if err != nil {
		t.Fatal(err)
	}
	defer of.Close()
	if err := of.Bundle(context.Background(), []Mod{AddFlow("table=1,priority=1,actions=drop")}); err != nil {
		t.Fatal(err)
	}
	if runs := e.ran("bundle"); len(runs) != 1 {
		t.Fatalf("an Exec that cannot start ahead ran %d bundles, want 1", len(runs))
	}
}

// waitReady waits until the client holds a process started ahead.
func waitReady(t *testing.T, of *OpenFlow) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if of.BundleProcessReady() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no bundle process ready after 5 s")
}

func TestNextBundleProcessWaitsForTheDelay(t *testing.T) {
	rec := newStartRecorder()
	of, err := NewOpenFlow(OpenFlowConfig{Bridge: "br-int", Exec: rec, PrestartBundles: true, PrestartDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer of.Close()
	waitReady(t, of) // the first is started at once
	for _, table := range []string{"1", "2"} {
		if err := of.Bundle(context.Background(), []Mod{AddFlow("table=" + table + ",priority=1,actions=drop")}); err != nil {
			t.Fatal(err)
		}
	}
	rec.mu.Lock()
	started := len(rec.started)
	rec.mu.Unlock()
	if started != 1 {
		t.Errorf("%d processes started, want 1: the next waits an hour after the first bundle", started)
	}
	if runs := rec.ran("bundle"); len(runs) != 1 || !strings.Contains(string(runs[0].Stdin), "table=2") {
		t.Errorf("the bundle within the delay: %d runs of ovs-ofctl whole, want the table=2 one", len(runs))
	}
}
