package ovs

import (
	"bytes"
	"context"
	"fmt"
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
	if len(c.Env) > 0 {
		cmd.Env = append(os.Environ(), c.Env...)
	}
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
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return "", &CommandError{Command: cmd, Stderr: strings.TrimSpace(string(stderr)), Err: err}
	}
	return string(stdout), nil
}
