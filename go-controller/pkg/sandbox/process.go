package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is one long-running process of the sandbox.
type Process struct {
	// Name identifies the process: its pid file is <pids>/<Name>.pid, its log <logs>/<Name>.log.
	Name string
	Path string
	Args []string
	Env  []string
	// NetNS, if set, runs the process inside that named network namespace.
	NetNS string
	// NewMountNS starts the process in a mount namespace of its own (every mount private
	// to it): a real node's namespace holder (RunNodeHost).
	NewMountNS bool `json:",omitempty"`
	// MountNSOf, if set, runs the process in the mount namespace of the named process (a
	// node's holder) and in NetNS, entered with setns (nsenter): `ip netns exec` would also
	// remount /sys, which hides the cgroup mounts kubelet needs.
	MountNSOf string `json:",omitempty"`
}

// start launches p in its own session so it outlives the command that started it, and
// records its pid at once, so Down can stop it even if Up dies right after. The spec is
// kept next to the pid file so Restart can start it again the same way.
func (l Layout) start(p Process) (int, error) {
	spec, err := json.Marshal(p)
	if err != nil {
		return 0, err
	}
	if err := os.WriteFile(filepath.Join(l.PidDir(), p.Name+".json"), spec, 0o644); err != nil {
		return 0, err
	}
	logf, err := os.OpenFile(l.LogFile(p.Name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	path, args, err := l.commandLine(p)
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(append(os.Environ(), markerEnv+"="+l.Marker()), p.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if p.NewMountNS {
		// Go makes every mount of the new namespace private (MS_REC|MS_PRIVATE on /).
		cmd.SysProcAttr.Unshareflags = syscall.CLONE_NEWNS
	}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", p.Name, err)
	}
	pid := cmd.Process.Pid
	// The start time first: pidOf trusts a pid file only together with it.
	started, err := startTime(pid)
	if err == nil {
		err = os.WriteFile(l.startFile(p.Name), []byte(started+"\n"), 0o644)
	}
	if err == nil {
		err = os.WriteFile(l.pidFile(p.Name), []byte(strconv.Itoa(pid)+"\n"), 0o644)
	}
	if err != nil {
		_ = cmd.Process.Kill()
		return 0, fmt.Errorf("record pid of %s: %w", p.Name, err)
	}
	// Reap it if it exits while we are still around; nobody waits for it otherwise.
	go func() { _ = cmd.Wait() }()
	return pid, nil
}

// commandLine is how p is started: directly, through `ip netns exec`, or through nsenter
// into a node's mount and network namespaces.
func (l Layout) commandLine(p Process) (string, []string, error) {
	switch {
	case p.MountNSOf != "":
		holder := l.pidOf(p.MountNSOf)
		if holder == 0 {
			return "", nil, fmt.Errorf("start %s: %s, which holds its mount namespace, is not running", p.Name, p.MountNSOf)
		}
		args := []string{fmt.Sprintf("--mount=/proc/%d/ns/mnt", holder)}
		if p.NetNS != "" {
			args = append(args, "--net="+NetNSPath(p.NetNS))
		}
		return "nsenter", append(append(args, "--", p.Path), p.Args...), nil
	case p.NetNS != "":
		return "ip", append([]string{"netns", "exec", p.NetNS, p.Path}, p.Args...), nil
	}
	return p.Path, p.Args, nil
}

// Restart stops the named process and starts it again with the same command line, as a
// service manager would (a DaemonSet pod's container restarting). It returns the new pid.
func (l Layout) Restart(name string) (int, error) {
	b, err := os.ReadFile(filepath.Join(l.PidDir(), name+".json"))
	if err != nil {
		return 0, fmt.Errorf("sandbox %q has no process %q (see `kovs-sandbox status`): %w", l.Name, name, err)
	}
	var p Process
	if err := json.Unmarshal(b, &p); err != nil {
		return 0, err
	}
	if err := l.stop(name, 10*time.Second); err != nil {
		return 0, err
	}
	return l.start(p)
}

// RestartAs restarts the named process as Restart does, running the binary at path with
// args (nil: its arguments unchanged) from now on: another release's kovs-agent on one
// node, say, for a version skew test, with only the flags that release knows. The spec is
// rewritten, so Start and Restart keep that binary and those arguments.
func (l Layout) RestartAs(name, path string, args []string) (int, error) {
	p, err := l.ProcessSpec(name)
	if err != nil {
		return 0, err
	}
	if _, err := os.Stat(path); err != nil {
		return 0, fmt.Errorf("restart %s as %s: %w", name, path, err)
	}
	if err := l.stop(name, 10*time.Second); err != nil {
		return 0, err
	}
	p.Path = path
	if args != nil {
		p.Args = args
	}
	return l.start(p)
}

// ProcessSpec is how the named process is started: its binary, arguments and namespace.
func (l Layout) ProcessSpec(name string) (Process, error) {
	b, err := os.ReadFile(filepath.Join(l.PidDir(), name+".json"))
	if err != nil {
		return Process{}, fmt.Errorf("sandbox %q has no process %q (see `kovs-sandbox status`): %w", l.Name, name, err)
	}
	var p Process
	if err := json.Unmarshal(b, &p); err != nil {
		return Process{}, err
	}
	return p, nil
}

// Kill ends the named process at once (SIGKILL), as a crash or a lost node would, and
// leaves it stopped; Start starts it again.
func (l Layout) Kill(name string) error {
	pid := l.pidOf(name)
	if pid == 0 {
		return fmt.Errorf("sandbox %q: process %q is not running", l.Name, name)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s (pid %d): %w", name, pid, err)
	}
	for range 250 {
		if !alive(pid) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	return l.forget(name)
}

// Start starts a stopped process again with its recorded command line.
func (l Layout) Start(name string) (int, error) {
	if l.Running(name) {
		return 0, fmt.Errorf("sandbox %q: process %q is running", l.Name, name)
	}
	b, err := os.ReadFile(filepath.Join(l.PidDir(), name+".json"))
	if err != nil {
		return 0, fmt.Errorf("sandbox %q has no process %q (see `kovs-sandbox status`): %w", l.Name, name, err)
	}
	var p Process
	if err := json.Unmarshal(b, &p); err != nil {
		return 0, err
	}
	return l.start(p)
}

func (l Layout) pidFile(name string) string { return filepath.Join(l.PidDir(), name+".pid") }

// startFile holds the start time of the process the pid file names (field 22 of
// /proc/<pid>/stat, clock ticks since boot): a pid and its start time name one process
// for as long as the machine runs, whatever it has exec'd since.
func (l Layout) startFile(name string) string { return filepath.Join(l.PidDir(), name+".start") }

// forget removes the records of a process that no longer runs.
func (l Layout) forget(name string) error {
	_ = os.Remove(l.startFile(name))
	return os.Remove(l.pidFile(name))
}

// pidOf returns the live pid recorded for name, or 0 when there is none or it is not ours.
//
// It matches the pid with the start time recorded beside it, not with the marker in the
// process's environment: while a process is inside execve, and `ip netns exec` or
// nsenter run one more after the one Start waited for, /proc/<pid>/environ reads empty,
// and under load for longer than any wait we could afford. make test once failed because
// up took the kube-proxy it had just started for exited. The marker remains the check for
// pid files written without a start time.
func (l Layout) pidOf(name string) int {
	b, err := os.ReadFile(l.pidFile(name))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0
	}
	if want, err := os.ReadFile(l.startFile(name)); err == nil {
		if got, err := startTime(pid); err != nil || got != strings.TrimSpace(string(want)) || !alive(pid) {
			return 0
		}
		return pid
	}
	if !l.owns(pid) {
		return 0
	}
	return pid
}

// startTime is the start time of pid, as /proc/<pid>/stat gives it (field 22).
func startTime(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	// The fields after the command name in parentheses start with field 3, the state.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", fmt.Errorf("/proc/%d/stat: no command name in %q", pid, b)
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 22-2 {
		return "", fmt.Errorf("/proc/%d/stat: %d fields after the command name, want at least 20", pid, len(fields))
	}
	return fields[22-3], nil
}

// owns reports whether pid runs with this sandbox's marker in its environment, so a pid
// file that outlived its process never makes us signal someone else's process.
func (l Layout) owns(pid int) bool {
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	// A process inside execve reads empty: read again for up to 100 ms.
	for try := 0; err == nil && len(env) == 0 && try < 20; try++ {
		time.Sleep(5 * time.Millisecond)
		env, err = os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	}
	if err != nil {
		return false
	}
	want := []byte(markerEnv + "=" + l.Marker())
	for _, kv := range bytes.Split(env, []byte{0}) {
		if bytes.Equal(kv, want) {
			return true
		}
	}
	return false
}

// PID is the live pid of the named process, 0 when it does not run (tests signal it).
func (l Layout) PID(name string) int { return l.pidOf(name) }

// Running reports whether the named process is alive.
func (l Layout) Running(name string) bool { return l.pidOf(name) != 0 }

// stop terminates the named process (SIGTERM, then SIGKILL after the grace period) and
// removes its pid file.
func (l Layout) stop(name string, grace time.Duration) error {
	pid := l.pidOf(name)
	defer l.forget(name)
	if pid == 0 {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop %s (pid %d): %w", name, pid, err)
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s (pid %d): %w", name, pid, err)
	}
	for i := 0; i < 100 && alive(pid); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] != 'Z'
	}
	return true
}

// processNames lists the processes that have pid files.
func (l Layout) processNames() []string {
	entries, _ := os.ReadDir(l.PidDir())
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".pid"); ok {
			names = append(names, n)
		}
	}
	return names
}

// OwnedPIDs lists every live process carrying this sandbox's marker, whether or not a pid
// file names it (children of crashed parents, processes started between fork and pid file).
func (l Layout) OwnedPIDs() []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || !l.owns(pid) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// run executes a short command and returns a useful error with its output.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// runIn executes a short command inside a named network namespace.
func runIn(netns, name string, args ...string) error {
	return run("ip", append([]string{"netns", "exec", netns, name}, args...)...)
}

// killPID sends SIGKILL to pid; a process already gone is no error.
func killPID(pid int) error {
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}
