package agent

import (
	"os"
	"path/filepath"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

// vswitchdCtl is the ovs-appctl target of the node's ovs-vswitchd, as a socket path. The
// agent runs in a container with a PID namespace of its own, where `ovs-appctl -t
// ovs-vswitchd` refuses the daemon's pidfile as stale (the pid is not in its namespace),
// so the name is resolved to the socket here: the fixed ovs-vswitchd.ctl in the run
// directory (kovs-ovs, or a daemon started with --unixctl there), else the socket named
// after the pid in ovs-vswitchd.pid (ovs-ctl's layout, host OVS). An explicit --vswitchd-ctl
// wins; with nothing found, the daemon name is left for ovs-appctl.
func vswitchdCtl(explicit, rundir string) string {
	if explicit != "" {
		return explicit
	}
	if rundir == "" {
		return ""
	}
	fixed := filepath.Join(rundir, "ovs-vswitchd.ctl")
	if _, err := os.Stat(fixed); err == nil {
		return fixed
	}
	byPid, err := ovs.UnixctlPath("ovs-vswitchd", rundir)
	if err != nil {
		return ""
	}
	if _, err := os.Stat(byPid); err == nil {
		return byPid
	}
	return ""
}
