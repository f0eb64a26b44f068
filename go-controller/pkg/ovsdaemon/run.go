package ovsdaemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	log "github.com/sirupsen/logrus"
)

// Run prepares the database, starts ovsdb-server and then ovs-vswitchd, and supervises
// them. It returns nil after a clean stop (ctx ended: SIGTERM or SIGINT), stopping
// ovs-vswitchd first and then ovsdb-server. When ovs-vswitchd exits on its own, or cannot
// be set up, it stops ovsdb-server and returns an error naming the daemon. When
// ovsdb-server exits on its own, it starts ovsdb-server again alone: ovs-vswitchd keeps
// forwarding with the flows it has and reconnects to the database, so a database crash is
// no datapath outage. Only ovsdb-server exiting maxDBRestarts times within dbRestartWindow
// ends the supervisor (then the kubelet restarts the container, both daemons with it).
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	if cfg.Log == nil {
		cfg.Log = log.StandardLogger()
	}
	for _, dir := range []string{cfg.RunDir, filepath.Dir(cfg.DBFile), filepath.Dir(cfg.SystemIDFile)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	if cfg.LoadKernelModule {
		loadKernelModule(ctx, cfg.Log)
	}
	if err := waitForOtherOVS(ctx, cfg); err != nil {
		return startupError(err)
	}
	if err := prepareDatabase(ctx, cfg); err != nil {
		return err
	}
	removeStaleCtlLinks(cfg)
	var db, vswitchd *daemon
	defer func() {
		if ctx.Err() != nil && vswitchd != nil {
			// Signalled, also while the daemons were still coming up (a probe can pass
			// before this supervisor saw them answer): an uninstalling agent is waited
			// for all the same.
			awaitUninstall(cfg)
			cfg.Log.Info("signalled: stopping ovs-vswitchd, then ovsdb-server")
		}
		vswitchd.stop(cfg.StopTimeout, cfg.Log)
		db.stop(cfg.StopTimeout, cfg.Log)
	}()
	db, err := startOVSDB(ctx, cfg, nil)
	if err != nil {
		return startupError(err)
	}
	restoring, err := initSwitch(ctx, cfg)
	if err != nil {
		return err
	}
	vswitchd, err = startDaemon("ovs-vswitchd", cfg.ovsVswitchdArgs(), cfg.env())
	if err != nil {
		return err
	}
	cfg.Log.WithFields(log.Fields{"daemon": "ovs-vswitchd", "pid": vswitchd.cmd.Process.Pid}).Info("started")
	err = waitUntil(ctx, cfg.StartTimeout, "ovs-vswitchd", []*daemon{db, vswitchd}, func() error {
		return appctlVersion(ctx, cfg.vswitchdCtl(), 5)
	})
	if err != nil {
		return startupError(err)
	}
	linkPidCtl(cfg, vswitchd.cmd.Process.Pid)
	cfg.Log.WithField("run-dir", cfg.RunDir).Info("ovsdb-server and ovs-vswitchd are up and answering")
	var restoreDeadline <-chan time.Time
	if restoring && cfg.FlowRestoreWaitTimeout > 0 {
		timer := time.NewTimer(cfg.FlowRestoreWaitTimeout)
		defer timer.Stop()
		restoreDeadline = timer.C
	}
	var dbExits []time.Time
	for {
		select {
		case <-ctx.Done():
			return nil // the deferred stop waits for an uninstalling agent
		case <-vswitchd.done:
			return vswitchd.exitError()
		case <-restoreDeadline:
			endRestoreWait(ctx, cfg)
			continue
		case <-db.done:
		}
		exit := db.exitError()
		now := time.Now()
		dbExits = append(slices.DeleteFunc(dbExits, func(t time.Time) bool { return now.Sub(t) > dbRestartWindow }), now)
		if len(dbExits) > maxDBRestarts {
			return fmt.Errorf("%w; it exited %d times within %s: giving up", exit, len(dbExits), dbRestartWindow)
		}
		cfg.Log.WithError(exit).Warn("ovsdb-server exited: starting it again; ovs-vswitchd keeps forwarding and reconnects")
		if db, err = startOVSDB(ctx, cfg, vswitchd); err != nil {
			return startupError(err)
		}
	}
}

// otherOVSPoll is how often kovs-ovs looks again whether another Open vSwitch still
// serves the node (waitForOtherOVS).
const otherOVSPoll = 100 * time.Millisecond

// waitForOtherOVS returns once no ovsdb-server answers on RunDir's db.sock: before kovs-ovs
// starts its own daemons, no other Open vSwitch may serve the node. The one this waits for
// is the previous kovs release's (OVS a sidecar of the agent's pod, on the same host
// directories): kovs-ovs pods start before the agent rollout replaces those pods, and an
// ovs-vswitchd started beside a running one cannot open the userspace datapath (its
// ovs-netdev tap is busy), so br-int never comes back. That one stops ovs-vswitchd before
// ovsdb-server, so a database that stopped answering means both are gone. A db.sock left
// by a crashed ovsdb-server refuses connections and is no wait; a connection that fails
// otherwise (a busy server's full backlog) is waited on. It returns errStopped
// when ctx ends first.
func waitForOtherOVS(ctx context.Context, cfg Config) error {
	var waitingSince time.Time
	for {
		conn, err := net.DialTimeout("unix", cfg.dbSocket(), time.Second)
		// Only a socket file that is missing or that no one listens on says no
		// ovsdb-server is there: a busy one's full backlog (EAGAIN) or a slow accept is
		// one that serves.
		if err != nil && (errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, os.ErrNotExist)) {
			if !waitingSince.IsZero() {
				cfg.Log.WithField("waited", time.Since(waitingSince).Round(time.Millisecond)).
					Info("the other Open vSwitch stopped: starting this node's")
			}
			return nil
		}
		if conn != nil {
			_ = conn.Close()
		}
		if waitingSince.IsZero() {
			waitingSince = time.Now()
			cfg.Log.WithField("socket", cfg.dbSocket()).WithError(err).Warn("another ovsdb-server serves this node's database socket " +
				"(the previous kovs release's OVS, in the agent's pod, until the agent rollout replaces it?): " +
				"waiting for it to stop before starting ovsdb-server and ovs-vswitchd")
		}
		select {
		case <-ctx.Done():
			return errStopped
		case <-time.After(otherOVSPoll):
		}
	}
}

// ovsdb-server may exit maxDBRestarts times within dbRestartWindow and be started again
// alone; once more and the supervisor gives up.
const (
	maxDBRestarts   = 5
	dbRestartWindow = 5 * time.Minute
)

// startOVSDB starts ovsdb-server and waits until it serves the database (while vswitchd,
// when running, stays up).
func startOVSDB(ctx context.Context, cfg Config, vswitchd *daemon) (*daemon, error) {
	db, err := startDaemon("ovsdb-server", cfg.ovsdbServerArgs(), cfg.env())
	if err != nil {
		return nil, err
	}
	cfg.Log.WithFields(log.Fields{"daemon": "ovsdb-server", "pid": db.cmd.Process.Pid, "db": cfg.DBFile}).Info("started")
	watched := []*daemon{db}
	if vswitchd != nil {
		watched = append(watched, vswitchd)
	}
	err = waitUntil(ctx, cfg.StartTimeout, "ovsdb-server", watched, func() error {
		_, err := run(ctx, cfg.env(), "ovs-vsctl", "--db=unix:"+cfg.dbSocket(), "--timeout=5", "--no-wait", "init")
		return err
	})
	return db, err
}

// startupError maps a stop during startup to success (the container was asked to stop).
func startupError(err error) error {
	if errors.Is(err, errStopped) {
		return nil
	}
	return err
}

// prepareDatabase creates the database from the schema, or converts it when the schema
// changed (an upgraded image), keeping a backup as ovs-ctl does.
func prepareDatabase(ctx context.Context, cfg Config) error {
	logger := cfg.Log.WithField("db", cfg.DBFile)
	if _, err := os.Stat(cfg.DBFile); errors.Is(err, os.ErrNotExist) {
		if _, err := run(ctx, nil, "ovsdb-tool", "create", cfg.DBFile, cfg.Schema); err != nil {
			return fmt.Errorf("create the database: %w", err)
		}
		logger.Info("database created")
		return nil
	} else if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	out, err := run(ctx, nil, "ovsdb-tool", "needs-conversion", cfg.DBFile, cfg.Schema)
	if err != nil {
		return fmt.Errorf("check the database against the schema: %w", err)
	}
	if strings.TrimSpace(out) == "no" {
		return nil
	}
	version, err := run(ctx, nil, "ovsdb-tool", "db-version", cfg.DBFile)
	if err != nil {
		return err
	}
	cksum, err := run(ctx, nil, "ovsdb-tool", "db-cksum", cfg.DBFile)
	if err != nil {
		return err
	}
	fields := strings.Fields(cksum)
	if len(fields) == 0 {
		return fmt.Errorf("ovsdb-tool db-cksum %s printed nothing", cfg.DBFile)
	}
	backup := fmt.Sprintf("%s.backup%s-%s", cfg.DBFile, strings.TrimSpace(version), fields[0])
	if err := copyFile(cfg.DBFile, backup); err != nil {
		return fmt.Errorf("back up the database before converting it: %w", err)
	}
	if _, err := run(ctx, nil, "ovsdb-tool", "convert", cfg.DBFile, cfg.Schema); err != nil {
		return fmt.Errorf("convert the database to %s: %w", cfg.Schema, err)
	}
	logger.WithFields(log.Fields{"from": strings.TrimSpace(version), "backup": backup}).Info("database converted to the new schema")
	return nil
}

// kovsBridges selects the bridges kovs-agent made (its EnsureBridge records this owner).
const kovsBridges = "external_ids:kovs.io/owner=kovs-agent"

// flowRestoreWait is the Open_vSwitch other_config key kovs-agent clears once it has
// restored its flows (agent.FlowRestoreWait).
const flowRestoreWait = "flow-restore-wait"

// initSwitch records the versions, the hostname and a system-id that stays the same
// across restarts in the Open_vSwitch record, as ovs-ctl does. When the database holds
// kovs-agent's bridges and no other, ovs-vswitchd restarts under a node's running pods: it sets
// other_config:flow-restore-wait=true, so that ovs-vswitchd keeps the datapath flows and
// handles no packet until the agent has put its flows back and cleared the key (no packet
// meets an empty table). It reports whether it did.
func initSwitch(ctx context.Context, cfg Config) (restoring bool, err error) {
	id, err := systemID(ctx, cfg)
	if err != nil {
		return false, err
	}
	host := cfg.Hostname
	if host == "" {
		host, _ = os.Hostname()
	}
	set := []string{"external_ids:system-id=" + strconv.Quote(id), "external_ids:hostname=" + strconv.Quote(host)}
	if v, err := run(ctx, nil, "ovsdb-tool", "schema-version", cfg.Schema); err == nil {
		set = append(set, "db_version="+strconv.Quote(strings.TrimSpace(v)))
	}
	if v, err := run(ctx, nil, "ovs-vswitchd", "--version"); err == nil {
		if f := strings.Fields(strings.SplitN(v, "\n", 2)[0]); len(f) > 0 {
			set = append(set, "ovs_version="+strconv.Quote(f[len(f)-1]))
		}
	}
	bridges := func(conditions ...string) ([]string, error) {
		out, err := run(ctx, cfg.env(), "ovs-vsctl", append([]string{"--db=unix:" + cfg.dbSocket(), "--timeout=5", "--no-wait",
			"--bare", "--columns=name", "find", "Bridge"}, conditions...)...)
		return strings.Fields(out), err
	}
	owned, err := bridges(kovsBridges)
	if err != nil {
		return false, fmt.Errorf("look for kovs-agent's bridges: %w", err)
	}
	all, err := bridges()
	if err != nil {
		return false, fmt.Errorf("list the bridges: %w", err)
	}
	// Any other bridge (an uplink bridge holding the node's address, on the userspace
	// datapath) would wait for kovs-agent too, and a restarted agent may need the node's
	// address to reach kube-apiserver before it can restore anything.
	restoring = len(owned) > 0 && len(all) == len(owned)
	if len(owned) > 0 && !restoring {
		cfg.Log.WithField("bridges", all).Info("bridges other than kovs-agent's are in the database: " +
			"ovs-vswitchd starts without " + flowRestoreWait + ", its tables empty until kovs-agent restores them")
	}
	if restoring {
		set = append(set, "other_config:"+flowRestoreWait+"=true")
	}
	args := append([]string{"--db=unix:" + cfg.dbSocket(), "--timeout=5", "--no-wait", "set", "Open_vSwitch", "."}, set...)
	if !restoring {
		// Left by an earlier run whose agent never cleared it: nothing would clear it now.
		args = append(args, "--", "remove", "Open_vSwitch", ".", "other_config", flowRestoreWait)
	}
	if _, err := run(ctx, cfg.env(), "ovs-vsctl", args...); err != nil {
		return false, fmt.Errorf("initialize the Open_vSwitch record: %w", err)
	}
	cfg.Log.WithFields(log.Fields{"system-id": id, "hostname": host}).Info("switch initialized")
	if restoring {
		cfg.Log.WithField("bridges", owned).Info("kovs-agent's bridges are in the database: " +
			"ovs-vswitchd starts with " + flowRestoreWait + "=true and forwards once kovs-agent has restored their flows")
	}
	return restoring, nil
}

// endRestoreWait clears flow-restore-wait when kovs-agent has not done it within
// FlowRestoreWaitTimeout.
func endRestoreWait(ctx context.Context, cfg Config) {
	out, err := run(ctx, cfg.env(), "ovs-vsctl", "--db=unix:"+cfg.dbSocket(), "--timeout=5", "--if-exists",
		"get", "Open_vSwitch", ".", "other_config:"+flowRestoreWait)
	if err != nil {
		cfg.Log.WithError(err).Warn("read " + flowRestoreWait)
		return
	}
	if strings.Trim(strings.TrimSpace(out), `"`) != "true" {
		return
	}
	if _, err := run(ctx, cfg.env(), "ovs-vsctl", "--db=unix:"+cfg.dbSocket(), "--timeout=5", "--no-wait",
		"remove", "Open_vSwitch", ".", "other_config", flowRestoreWait); err != nil {
		cfg.Log.WithError(err).Warn("clear " + flowRestoreWait)
		return
	}
	cfg.Log.WithField("timeout", cfg.FlowRestoreWaitTimeout).Warn("kovs-agent did not restore its flows in time: " +
		flowRestoreWait + " cleared, ovs-vswitchd forwards with the tables it has")
}

// systemID returns the switch's system-id: the one in SystemIDFile, else the one the
// database already has, else a new random UUID; it is written to SystemIDFile.
func systemID(ctx context.Context, cfg Config) (string, error) {
	b, err := os.ReadFile(cfg.SystemIDFile)
	switch {
	case err == nil:
		id := strings.TrimSpace(string(b))
		if id == "" || strings.ContainsAny(id, " \t\n\"") {
			return "", fmt.Errorf("system-id file %s holds %q, not a system-id: fix or remove it", cfg.SystemIDFile, id)
		}
		return id, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("system-id: %w", err)
	}
	out, err := run(ctx, cfg.env(), "ovs-vsctl", "--db=unix:"+cfg.dbSocket(), "--timeout=5", "--no-wait",
		"--if-exists", "get", "Open_vSwitch", ".", "external_ids:system-id")
	if err != nil {
		return "", fmt.Errorf("read the database's system-id: %w", err)
	}
	id := strings.Trim(strings.TrimSpace(out), `"`)
	if id == "" {
		id = uuid.NewString()
	}
	tmp := cfg.SystemIDFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("system-id: %w", err)
	}
	if err := os.Rename(tmp, cfg.SystemIDFile); err != nil {
		return "", fmt.Errorf("system-id: %w", err)
	}
	return id, nil
}

// loadKernelModule loads the openvswitch module if it is available and not loaded.
func loadKernelModule(ctx context.Context, logger log.FieldLogger) {
	if _, err := os.Stat("/sys/module/openvswitch"); err == nil {
		return
	}
	if _, err := exec.LookPath("modprobe"); err != nil {
		logger.Info("openvswitch kernel module not loaded and no modprobe: only the userspace datapath (netdev) works")
		return
	}
	if _, err := run(ctx, nil, "modprobe", "openvswitch"); err != nil {
		logger.WithError(err).Info("openvswitch kernel module not loaded: only the userspace datapath (netdev) works")
		return
	}
	logger.Info("openvswitch kernel module loaded")
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// linkPidCtl links <RunDir>/ovs-vswitchd.<pid>.ctl, where `ovs-appctl -t ovs-vswitchd`
// looks (through the pidfile) when run in the same PID namespace, to the fixed socket.
func linkPidCtl(cfg Config, pid int) {
	link := filepath.Join(cfg.RunDir, fmt.Sprintf("ovs-vswitchd.%d.ctl", pid))
	if link == cfg.vswitchdCtl() {
		return
	}
	_ = os.Remove(link)
	if err := os.Symlink(cfg.vswitchdCtl(), link); err != nil {
		cfg.Log.WithError(err).Warn("ovs-appctl -t ovs-vswitchd will not find the unixctl socket (use -t " + cfg.vswitchdCtl() + ")")
	}
}

// removeStaleCtlLinks removes the links linkPidCtl made for earlier ovs-vswitchd runs.
func removeStaleCtlLinks(cfg Config) {
	links, _ := filepath.Glob(filepath.Join(cfg.RunDir, "ovs-vswitchd.*.ctl"))
	for _, l := range links {
		if st, err := os.Lstat(l); err == nil && st.Mode()&os.ModeSymlink != 0 {
			_ = os.Remove(l)
		}
	}
}

// Probe returns nil when ovsdb-server answers on RunDir's db.sock and ovs-vswitchd on
// its unixctl socket vswitchdCtl, each within timeout: what a readiness or liveness
// probe asks.
func Probe(ctx context.Context, runDir, vswitchdCtl string, timeout time.Duration) error {
	secs := max(1, int((timeout+time.Second-1)/time.Second))
	sock := "unix:" + filepath.Join(runDir, "db.sock")
	out, err := run(ctx, nil, "ovsdb-client", "--timeout="+strconv.Itoa(secs), "list-dbs", sock)
	if err != nil {
		return fmt.Errorf("ovsdb-server does not answer: %w", err)
	}
	if !strings.Contains(out, "Open_vSwitch") {
		return fmt.Errorf("ovsdb-server on %s serves no Open_vSwitch database (it lists %q)", sock, strings.TrimSpace(out))
	}
	if err := appctlVersion(ctx, vswitchdCtl, secs); err != nil {
		return fmt.Errorf("ovs-vswitchd does not answer: %w", err)
	}
	return nil
}

func appctlVersion(ctx context.Context, ctl string, secs int) error {
	_, err := run(ctx, nil, "ovs-appctl", "--timeout="+strconv.Itoa(secs), "-t", ctl, "version")
	return err
}

// UninstallMarker is the file of the run directory with which kovs-agent says the
// operator asked for kovs to be removed (kovsctl uninstall): the agent removes its
// bridges through OVS at its shutdown, so OVS, stopped by the same `kubectl delete -k`,
// must outlast it (awaitUninstall). The agent removes the file when the request is
// withdrawn and once it has cleaned up.
const UninstallMarker = "kovs-uninstall"

// awaitUninstall holds a stopping supervisor while kovs-agent uninstalls: with the
// marker present, it waits until the agent removes it, at most UninstallWait, before the
// daemons stop. The agent removes it once its bridges are gone from the database and
// their devices from the node: waiting only for the bridges' rows let ovs-vswitchd stop
// before it had closed their taps (kovs-gw0 was left on a node, and the agent, whose
// wait for ovs-vswitchd then never ended, was killed before it removed kovs-cni).
func awaitUninstall(cfg Config) {
	if cfg.UninstallWait <= 0 {
		return
	}
	marker := filepath.Join(cfg.RunDir, UninstallMarker)
	if _, err := os.Stat(marker); err != nil {
		return
	}
	cfg.Log.Info("kovs is being uninstalled: waiting for kovs-agent to remove its bridges and mark it done")
	deadline := time.After(cfg.UninstallWait)
	for {
		if _, err := os.Stat(marker); errors.Is(err, os.ErrNotExist) {
			cfg.Log.Info("kovs-agent removed its bridges")
			return
		}
		select {
		case <-deadline:
			cfg.Log.WithField("waited", cfg.UninstallWait).Warn("kovs-agent did not finish its uninstall in time: stopping OVS")
			return
		case <-time.After(100 * time.Millisecond): // the agent tells only by the file
		}
	}
}
