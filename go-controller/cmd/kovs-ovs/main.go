// Command kovs-ovs is the kovs/ovs image's entrypoint: it runs ovsdb-server and
// ovs-vswitchd in the foreground and lives exactly as long as both do
// (go-controller/pkg/ovsdaemon). `kovs-ovs probe` is the container's readiness and
// liveness check.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/ovsdaemon"
)

const usage = `usage: kovs-ovs [flags]          run ovsdb-server and ovs-vswitchd until SIGTERM
       kovs-ovs probe [flags]    exit 0 only if both answer (readiness and liveness probe)

flags:
`

func main() {
	args, probe := os.Args[1:], false
	if len(args) > 0 && args[0] == "probe" {
		args, probe = args[1:], true
	}
	fs := flag.NewFlagSet("kovs-ovs", flag.ExitOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, usage); fs.PrintDefaults() }
	cfg := ovsdaemon.Config{Log: log.StandardLogger()}
	fs.StringVar(&cfg.DBFile, "db-file", ovsdaemon.DefaultDBFile, "the Open_vSwitch database (created if missing, converted if the schema changed)")
	fs.StringVar(&cfg.Schema, "schema", ovsdaemon.DefaultSchema, "the Open_vSwitch schema")
	fs.StringVar(&cfg.RunDir, "run-dir", ovsdaemon.DefaultRunDir, "sockets and pidfiles (db.sock, ovs-vswitchd's unixctl socket)")
	fs.StringVar(&cfg.VswitchdCtl, "vswitchd-ctl", "", "ovs-vswitchd's unixctl socket (default <run-dir>/ovs-vswitchd.ctl); kovs-agent --vswitchd-ctl names the same")
	fs.StringVar(&cfg.SystemIDFile, "system-id-file", ovsdaemon.DefaultSystemIDFile, "keeps the switch's system-id across restarts")
	fs.StringVar(&cfg.LogLevel, "log-level", "info", "the daemons' console log level: off, emer, err, warn, info or dbg")
	fs.BoolVar(&cfg.Mlockall, "mlockall", false, "lock ovs-vswitchd's memory (needs CAP_IPC_LOCK)")
	fs.BoolVar(&cfg.LoadKernelModule, "load-kernel-module", true, "load the openvswitch kernel module if available and not loaded")
	fs.DurationVar(&cfg.StartTimeout, "start-timeout", 30*time.Second, "how long each daemon may take to answer after it starts")
	fs.DurationVar(&cfg.StopTimeout, "stop-timeout", 10*time.Second, "how long a daemon may take to exit after SIGTERM before it is killed")
	fs.DurationVar(&cfg.FlowRestoreWaitTimeout, "flow-restore-wait-timeout", 2*time.Minute, "with kovs-agent's bridge in the database ovs-vswitchd starts with flow-restore-wait=true until the agent has restored its flows; after this long kovs-ovs clears it itself (0: never)")
	fs.DurationVar(&cfg.UninstallWait, "uninstall-wait", 20*time.Second, "on SIGTERM while kovs-agent uninstalls kovs (kovsctl uninstall), how long to wait for it to mark its cleanup done (its bridges and their devices gone) before stopping (0: no wait)")
	probeTimeout := fs.Duration("probe-timeout", 5*time.Second, "probe: how long each daemon may take to answer")
	_ = fs.Parse(args)
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "kovs-ovs: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		os.Exit(2)
	}
	if probe {
		if err := ovsdaemon.Probe(context.Background(), cfg.RunDir, ovsdaemon.VswitchdCtlPath(cfg.RunDir, cfg.VswitchdCtl), *probeTimeout); err != nil {
			fmt.Fprintf(os.Stderr, "kovs-ovs probe: %v\n", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := ovsdaemon.Run(ctx, cfg); err != nil {
		log.WithError(err).Error("kovs-ovs: exiting")
		stop()
		os.Exit(1)
	}
}
