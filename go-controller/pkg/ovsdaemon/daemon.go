package ovsdaemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	log "github.com/sirupsen/logrus"
)

// daemon is one child process run in the foreground.
type daemon struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and been reaped
	err  error         // how it exited; read only after done
}

// startDaemon starts name with args, its output on ours (the container's log). The child
// gets SIGTERM if the supervisor dies without stopping it, so no daemon outlives it.
func startDaemon(name string, args, env []string) (*daemon, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	// Its own process group: a terminal's Ctrl-C reaches the supervisor alone, which stops
	// the daemons in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	d := &daemon{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		close(d.done)
	}()
	return d, nil
}

// exitError says how the daemon exited, as an error (it was not asked to).
func (d *daemon) exitError() error {
	if d.err == nil {
		return fmt.Errorf("%s (pid %d) exited with status 0", d.name, d.cmd.Process.Pid)
	}
	return fmt.Errorf("%s (pid %d) exited: %w", d.name, d.cmd.Process.Pid, d.err)
}

// stop sends SIGTERM, waits up to timeout, then SIGKILLs; a daemon already gone is fine.
func (d *daemon) stop(timeout time.Duration, logger log.FieldLogger) {
	if d == nil {
		return
	}
	select {
	case <-d.done:
		return
	default:
	}
	logger = logger.WithFields(log.Fields{"daemon": d.name, "pid": d.cmd.Process.Pid})
	logger.Info("stopping")
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		logger.WithField("exit", fmt.Sprint(d.err)).Info("stopped")
	case <-time.After(timeout):
		logger.WithField("timeout", timeout).Warn("did not exit after SIGTERM: killing it")
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// errStopped says the context ended (a signal) while waiting: a clean stop, not a failure.
var errStopped = errors.New("stopped")

// waitUntil polls ready every 100ms until it succeeds, the context ends (errStopped), a
// watched daemon exits, or timeout passes (an error with ready's last error).
func waitUntil(ctx context.Context, timeout time.Duration, what string, watched []*daemon, ready func() error) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not ready after %s: %w", what, timeout, err)
		}
		for _, d := range watched {
			select {
			case <-d.done:
				return fmt.Errorf("%s: %w", what, d.exitError())
			default:
			}
		}
		select {
		case <-ctx.Done():
			return errStopped
		case <-tick.C:
		}
	}
}

// run runs a tool to completion and returns its standard output, or an error with its
// standard error.
func run(ctx context.Context, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
