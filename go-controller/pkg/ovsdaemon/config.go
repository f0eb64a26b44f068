// Package ovsdaemon runs Open vSwitch's two daemons, ovsdb-server and ovs-vswitchd, in
// the foreground as children of one supervisor (kovs-ovs, the kovs/ovs image's
// entrypoint), the way ovs-ctl sets them up: the database created or converted, the
// switch record initialized with a stable system-id. The supervisor lives as long as
// ovs-vswitchd does: when it exits the supervisor stops ovsdb-server and fails, so the
// kubelet restarts the container. ovsdb-server exiting is no datapath outage: it is
// started again alone, and ovs-vswitchd keeps forwarding and reconnects. On SIGTERM the
// supervisor stops ovs-vswitchd, then ovsdb-server. Probe answers whether both daemons
// answer, for readiness and liveness probes.
package ovsdaemon

import (
	"fmt"
	"path/filepath"
	"time"

	log "github.com/sirupsen/logrus"
)

// Config says where the daemons keep their files. The defaults are Debian's and
// ovs-ctl's, so tools on the host or in other containers find them where they expect.
type Config struct {
	// DBFile is the Open_vSwitch database; created from Schema if missing, converted if
	// Schema changed.
	DBFile string
	Schema string
	// RunDir holds the sockets (db.sock, the unixctl sockets) and pidfiles; it is the
	// daemons' OVS_RUNDIR.
	RunDir string
	// VswitchdCtl is ovs-vswitchd's unixctl socket, at a fixed path so that ovs-appctl
	// and kovs-agent in another container (another PID namespace, where the pidfile's
	// PID means nothing) reach it with `-t <path>`. Empty: <RunDir>/ovs-vswitchd.ctl.
	VswitchdCtl string
	// SystemIDFile keeps the switch's system-id across restarts (ovs-ctl's
	// --system-id=random uses the same file).
	SystemIDFile string
	// LogLevel is the daemons' console log level (off, emer, err, warn, info, dbg).
	LogLevel string
	// Mlockall locks ovs-vswitchd's memory (needs CAP_IPC_LOCK), as ovs-ctl does by
	// default on hosts.
	Mlockall bool
	// LoadKernelModule loads the openvswitch kernel module when it is available and not
	// loaded (ovs-ctl does too); without it the userspace datapath still works.
	LoadKernelModule bool
	// StartTimeout bounds the wait for each daemon to answer after it starts.
	StartTimeout time.Duration
	// StopTimeout bounds the wait for a daemon to exit after SIGTERM, before SIGKILL.
	StopTimeout time.Duration
	// FlowRestoreWaitTimeout bounds how long ovs-vswitchd, started with
	// flow-restore-wait=true because kovs-agent's bridge is in the database, waits for
	// the agent to restore its flows and clear the key: after it kovs-ovs clears the key
	// itself, so the node's other bridges do not wait for an agent that never comes.
	// 0: wait for the agent however long it takes.
	FlowRestoreWaitTimeout time.Duration
	// UninstallWait bounds how long a stopping supervisor waits for kovs-agent to remove
	// its bridges when the agent marked an uninstall (UninstallMarker). 0: no wait.
	UninstallWait time.Duration
	// Hostname is recorded as external_ids:hostname; empty: os.Hostname.
	Hostname string
	Log      log.FieldLogger
}

// Defaults of Config, as kovs-ovs's flags have them.
const (
	DefaultDBFile       = "/etc/openvswitch/conf.db"
	DefaultSchema       = "/usr/share/openvswitch/vswitch.ovsschema"
	DefaultRunDir       = "/var/run/openvswitch"
	DefaultSystemIDFile = "/etc/openvswitch/system-id.conf"
)

// dbSocket is ovsdb-server's socket, the one every client (ovs-vsctl, kovs-agent) uses.
func (c Config) dbSocket() string { return filepath.Join(c.RunDir, "db.sock") }

// vswitchdCtl is VswitchdCtl or its default.
func (c Config) vswitchdCtl() string { return VswitchdCtlPath(c.RunDir, c.VswitchdCtl) }

// VswitchdCtlPath is ctl, or <runDir>/ovs-vswitchd.ctl when ctl is empty.
func VswitchdCtlPath(runDir, ctl string) string {
	if ctl != "" {
		return ctl
	}
	return filepath.Join(runDir, "ovs-vswitchd.ctl")
}

func (c Config) pidfile(daemon string) string { return filepath.Join(c.RunDir, daemon+".pid") }

// env is the environment of the daemons and tools: OVS_RUNDIR makes `ovs-appctl -t
// ovs-vswitchd` find the unixctl socket through the pidfile.
func (c Config) env() []string {
	return []string{"OVS_RUNDIR=" + c.RunDir, "OVS_DBDIR=" + filepath.Dir(c.DBFile)}
}

func (c Config) validate() error {
	paths := map[string]string{"database": c.DBFile, "schema": c.Schema, "run directory": c.RunDir,
		"system-id file": c.SystemIDFile, "ovs-vswitchd unixctl socket": c.vswitchdCtl()}
	for name, p := range paths {
		if p == "" || !filepath.IsAbs(p) {
			return fmt.Errorf("%s path %q: want an absolute path", name, p)
		}
	}
	switch c.LogLevel {
	case "off", "emer", "err", "warn", "info", "dbg":
	default:
		return fmt.Errorf("log level %q: want off, emer, err, warn, info or dbg", c.LogLevel)
	}
	if c.StartTimeout <= 0 || c.StopTimeout <= 0 {
		return fmt.Errorf("start and stop timeouts must be positive")
	}
	return nil
}

// ovsdbServerArgs are ovsdb-server's arguments: ovs-ctl's, in the foreground.
func (c Config) ovsdbServerArgs() []string {
	return []string{
		c.DBFile,
		"-vconsole:" + c.LogLevel, "-vsyslog:off",
		"--remote=punix:" + c.dbSocket(),
		"--remote=db:Open_vSwitch,Open_vSwitch,manager_options",
		"--private-key=db:Open_vSwitch,SSL,private_key",
		"--certificate=db:Open_vSwitch,SSL,certificate",
		"--bootstrap-ca-cert=db:Open_vSwitch,SSL,ca_cert",
		"--pidfile=" + c.pidfile("ovsdb-server"),
	}
}

// ovsVswitchdArgs are ovs-vswitchd's arguments: ovs-ctl's, in the foreground.
func (c Config) ovsVswitchdArgs() []string {
	args := []string{
		"unix:" + c.dbSocket(),
		"-vconsole:" + c.LogLevel, "-vsyslog:off",
		"--pidfile=" + c.pidfile("ovs-vswitchd"),
		"--unixctl=" + c.vswitchdCtl(),
	}
	if c.Mlockall {
		args = append(args, "--mlockall")
	}
	return args
}
