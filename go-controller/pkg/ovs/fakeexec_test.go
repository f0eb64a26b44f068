package ovs

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"sync"
)

// fakeExec answers commands by subcommand and records them.
type fakeExec struct {
	mu      sync.Mutex
	runs    []Command
	answers map[string]fakeAnswer
}

type fakeAnswer struct {
	stdout, stderr string
	err            error
}

func newFakeExec() *fakeExec { return &fakeExec{answers: map[string]fakeAnswer{}} }

// on makes runs of subcommand sub answer a.
func (f *fakeExec) on(sub string, a fakeAnswer) *fakeExec {
	f.answers[sub] = a
	return f
}

// fail makes runs of subcommand sub exit 1 with stderr.
func (f *fakeExec) fail(sub, stderr string) *fakeExec {
	return f.on(sub, fakeAnswer{stderr: stderr, err: &exec.ExitError{}})
}

func (f *fakeExec) Run(ctx context.Context, cmd Command) ([]byte, []byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs = append(f.runs, cmd)
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	a, ok := f.answers[subcommand(cmd.Args)]
	if !ok {
		return nil, nil, errors.New("fakeExec: no answer for " + cmd.String())
	}
	return []byte(a.stdout), []byte(a.stderr), a.err
}

// ran returns the commands run with subcommand sub.
func (f *fakeExec) ran(sub string) []Command {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(f.runs), func(c Command) bool { return subcommand(c.Args) != sub })
}
