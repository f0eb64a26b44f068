package ovs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// Command is one run of a program.
type Command struct {
	Path  string   // program name or path, e.g. "ovs-ofctl"
	Args  []string // arguments, without the program name
	Stdin []byte   // standard input; nil for none
	Env   []string // KEY=VALUE entries added to the inherited environment
}

// String renders the command line, for logs and errors.
func (c Command) String() string {
	return strings.Join(append([]string{c.Path}, c.Args...), " ")
}

// environ is the command's environment for exec.Cmd.Env: nil (the inherited one) without
// Env entries.
func (c Command) environ() []string {
	if len(c.Env) == 0 {
		return nil
	}
	return append(os.Environ(), c.Env...)
}

// Exec runs commands. OSExec runs real programs; tests pass a fake.
type Exec interface {
	// Run runs cmd to completion, or until ctx is done, and returns what it
	// wrote. err is non-nil if it could not start or exited non-zero.
	Run(ctx context.Context, cmd Command) (stdout, stderr []byte, err error)
}

// OSExec runs programs with os/exec.
type OSExec struct{}

// Run implements Exec.
func (OSExec) Run(ctx context.Context, c Command) ([]byte, []byte, error) {
	cmd := exec.CommandContext(ctx, c.Path, c.Args...)
	cmd.Env = c.environ()
	if c.Stdin != nil {
		cmd.Stdin = bytes.NewReader(c.Stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.Bytes(), stderr.Bytes(), err
}

// CommandError is a command that failed, with what it printed on stderr.
type CommandError struct {
	Command Command
	Stderr  string
	Err     error
}

// Error names the program and its subcommand, and gives stderr.
func (e *CommandError) Error() string {
	what := e.Command.Path
	if sub := subcommand(e.Command.Args); sub != "" {
		what += " " + sub
	}
	if e.Stderr == "" {
		return fmt.Sprintf("%s: %v", what, e.Err)
	}
	return fmt.Sprintf("%s: %v: %s", what, e.Err, e.Stderr)
}

// Unwrap returns the error of the run (an *exec.ExitError, a context error...).
func (e *CommandError) Unwrap() error { return e.Err }

// subcommand is the first argument that is not an option, e.g. "bundle".
func subcommand(args []string) string {
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-O" || a == "-t":
			i++ // the option's value
		case strings.HasPrefix(a, "-"):
		default:
			return a
		}
	}
	return ""
}

// run runs cmd and turns a failure into a *CommandError with a trimmed stderr.
func run(ctx context.Context, e Exec, cmd Command) (string, error) {
	stdout, stderr, err := e.Run(ctx, cmd)
	return commandResult(ctx, cmd, stdout, stderr, err)
}

// commandResult is stdout of a run of cmd that succeeded, or a *CommandError.
func commandResult(ctx context.Context, cmd Command, stdout, stderr []byte, err error) (string, error) {
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return "", &CommandError{Command: cmd, Stderr: strings.TrimSpace(string(stderr)), Err: err}
	}
	return string(stdout), nil
}

// Starter is an Exec that can start a program before its input is known: the process
// loads, then waits on its standard input until Finish feeds it. OSExec is one; an Exec
// that is not (a test's fake) runs each command whole.
type Starter interface {
	// Start starts cmd (its Stdin is ignored: Finish gives it).
	Start(cmd Command) (Started, error)
}

// Started is a process a Starter started, waiting for its standard input.
type Started interface {
	// Finish writes stdin, closes it and waits for the process to exit, killing it when
	// ctx is done first; it returns what the process wrote, as Exec.Run does.
	Finish(ctx context.Context, stdin []byte) (stdout, stderr []byte, err error)
	// Abandon kills the process and waits for it.
	Abandon()
}

var _ Starter = OSExec{}

// Start implements Starter.
func (OSExec) Start(c Command) (Started, error) {
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Env = c.environ()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	p := &osStarted{cmd: cmd, stdin: stdin}
	cmd.Stdout, cmd.Stderr = &p.stdout, &p.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

// osStarted is a process OSExec started.
type osStarted struct {
	cmd            *exec.Cmd
	stdin          io.WriteCloser
	stdout, stderr bytes.Buffer
}

// Finish implements Started.
func (p *osStarted) Finish(ctx context.Context, stdin []byte) ([]byte, []byte, error) {
	done := make(chan error, 1)
	go func() {
		_, writeErr := p.stdin.Write(stdin)
		closeErr := p.stdin.Close()
		err := p.cmd.Wait()
		// A process that exits before reading all of its input makes the write fail;
		// its exit status says why, so that error comes first.
		if err == nil {
			err = firstErr(writeErr, closeErr)
		}
		done <- err
	}()
	select {
	case err := <-done:
		return p.stdout.Bytes(), p.stderr.Bytes(), err
	case <-ctx.Done():
		_ = p.cmd.Process.Kill()
		err := <-done
		return p.stdout.Bytes(), p.stderr.Bytes(), err
	}
}

// Abandon implements Started.
func (p *osStarted) Abandon() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait() // closes stdin too
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// finish feeds a started cmd its input and turns a failure into a *CommandError, as run
// does.
func finish(ctx context.Context, p Started, cmd Command) (string, error) {
	stdout, stderr, err := p.Finish(ctx, cmd.Stdin)
	return commandResult(ctx, cmd, stdout, stderr, err)
}
