package framework

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// WaitCommandLine waits (10 s at most) until the sandbox's process proc runs with a
// command line holding want (its arguments NUL-separated, as /proc shows them), and fails
// tb with what it runs otherwise. The sandbox starts a node's processes through `ip netns
// exec` or nsenter, which exec them in turn: read during that execve, the command line is
// empty.
func (s *Sandbox) WaitCommandLine(tb testing.TB, proc, want, what string) {
	tb.Helper()
	Eventually(tb, 10*time.Second, proc+" running "+what, func() error {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", s.Layout.PID(proc)))
		if err != nil || !strings.Contains(string(cmdline), want) {
			return fmt.Errorf("%s runs %q (%v), want %s", proc, strings.ReplaceAll(string(cmdline), "\x00", " "), err, what)
		}
		return nil
	})
}
