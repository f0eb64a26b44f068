package ovs

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

func TestOSExecPassesStdinAndEnv(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	cmd := Command{Path: "sh", Args: []string{"-c", `cat; printf " $KOVS_TEST"`}, Stdin: []byte("in"), Env: []string{"KOVS_TEST=env"}}
	out, err := run(context.Background(), OSExec{}, cmd)
	if err != nil || out != "in env" {
		t.Errorf("run = %q, %v", out, err)
	}
}

func TestOSExecFailureCarriesStderr(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	_, err := run(context.Background(), OSExec{}, Command{Path: "sh", Args: []string{"-c", "echo boom >&2; exit 3"}})
	var ce *CommandError
	var ee *exec.ExitError
	if !errors.As(err, &ce) || ce.Stderr != "boom" || !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("run = %v, want a CommandError with stderr and exit code", err)
	}
	if !strings.HasSuffix(err.Error(), "exit status 3: boom") {
		t.Errorf("error reads %q", err)
	}
}

func TestSubcommandSkipsOptions(t *testing.T) {
	for args, want := range map[string]string{
		"-O OpenFlow15 --no-names dump-flows br-int": "dump-flows",
		"-t /run/ovs-vswitchd.ctl ofproto/trace br":  "ofproto/trace",
		"--version": "",
	} {
		if got := subcommand(strings.Fields(args)); got != want {
			t.Errorf("subcommand(%s) = %q, want %q", args, got, want)
		}
	}
}
