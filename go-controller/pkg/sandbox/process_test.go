package sandbox

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

func processLayout(t *testing.T) Layout {
	t.Helper()
	l, err := NewLayout("proc", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{l.PidDir(), l.LogDir()} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// A process that has exec'd into an environment without the sandbox's marker is still the
// process start recorded: `ip netns exec` runs a second execve after the one start waits
// for, and while it runs /proc/<pid>/environ reads empty. `env -i` keeps it empty for good.
func TestRunningDoesNotDependOnTheEnvironmentAfterExec(t *testing.T) {
	l := processLayout(t)
	pid, err := l.start(Process{Name: "bare", Path: "env", Args: []string{"-i", "sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = killPID(pid) })
	// Until sleep runs under its empty environment, the check would pass on the marker.
	deadline := time.Now().Add(10 * time.Second)
	for {
		env, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		if string(comm) == "sleep\n" && len(env) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d: still %q with %d bytes of environment", pid, comm, len(env))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !l.Running("bare") {
		t.Fatalf("pid %d runs, exec'd with an empty environment, but Running says it exited", pid)
	}
	if err := l.stop("bare", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Errorf("stop left pid %d running", pid)
	}
	if _, err := os.Stat(l.startFile("bare")); !os.IsNotExist(err) {
		t.Errorf("stop left the start record behind: %v", err)
	}
}

// A pid file whose pid now names another process (the pid was reused) is not ours, nor is
// a process that has exited and not been reaped.
func TestRunningRefusesAReusedPidAndAZombie(t *testing.T) {
	l := processLayout(t)
	record := func(name string, pid int, started string) {
		t.Helper()
		if err := os.WriteFile(l.startFile(name), []byte(started+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(l.pidFile(name), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	self, err := startTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	record("reused", os.Getpid(), self+"1")
	if l.Running("reused") {
		t.Error("a live pid with another start time taken for ours")
	}
	record("self", os.Getpid(), self)
	if !l.Running("self") {
		t.Error("a live pid with its own start time refused")
	}

	zombie := exec.Command("true")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = zombie.Wait() })
	started, err := startTime(zombie.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	record("zombie", zombie.Process.Pid, started)
	deadline := time.Now().Add(10 * time.Second)
	for alive(zombie.Process.Pid) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if l.Running("zombie") {
		t.Error("an exited, unreaped process taken for running")
	}
}
