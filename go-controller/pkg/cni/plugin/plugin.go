package plugin

import (
	"io"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
)

// Bounds of the agent calls. The agent bounds its own waits below them (30s for a pod's
// NetworkPolicy), so that its explanation, not a bare deadline, reaches the runtime.
const (
	addTimeout       = 60 * time.Second
	agentCallTimeout = 30 * time.Second
)

// Plugin is kovs-cni. Each exported method is one CNI command, with skel's signature;
// errors are *types.Error with a code and a message a person can act on. A Plugin keeps
// no state between commands, so one value serves concurrent commands (tests run many).
type Plugin struct {
	stdout io.Writer
	stderr io.Writer
}

// New returns the plugin writing CNI results to stdout and, when the network config
// names no log file, warnings to stderr.
func New(stdout, stderr io.Writer) *Plugin {
	return &Plugin{stdout: stdout, stderr: stderr}
}

// Funcs returns the commands for skel.PluginMainFuncs.
func (p *Plugin) Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: p.Add, Del: p.Del, Check: p.Check, GC: p.GC, Status: p.Status}
}

// Add is CNI ADD: see add.
func (p *Plugin) Add(args *skel.CmdArgs) error { return p.run("ADD", args, p.add) }

// Del is CNI DEL: see del.
func (p *Plugin) Del(args *skel.CmdArgs) error { return p.run("DEL", args, p.del) }

// Check is CNI CHECK: see check.
func (p *Plugin) Check(args *skel.CmdArgs) error { return p.run("CHECK", args, p.check) }

// GC is CNI GC: see gc.
func (p *Plugin) GC(args *skel.CmdArgs) error { return p.run("GC", args, p.gc) }

// Status is CNI STATUS: see status.
func (p *Plugin) Status(args *skel.CmdArgs) error { return p.run("STATUS", args, p.status) }

// invocation is one command's context: its arguments, config, agent and log.
type invocation struct {
	args   *skel.CmdArgs
	conf   *NetConf
	agent  *cni.Client
	log    *logrus.Entry
	stderr io.Writer // where a delegated plugin's stderr goes
}

// run parses the config, runs cmd and turns its error into a CNI error.
func (p *Plugin) run(command string, args *skel.CmdArgs, cmd func(*invocation) error) error {
	conf, err := parseNetConf(args.StdinData)
	if err != nil {
		return cniError(err)
	}
	log, closeLog := p.logger(conf, command, args)
	defer closeLog()
	inv := &invocation{args: args, conf: conf, agent: cni.NewClient(conf.Socket), log: log, stderr: p.stderr}
	start := time.Now()
	err = cmd(inv)
	inv.log = inv.log.WithField("duration", time.Since(start).Round(time.Millisecond))
	if err != nil {
		// Info: the runtime reports the error itself; the log file keeps the story.
		inv.log.WithError(err).Info("command failed")
		return cniError(err)
	}
	inv.log.Info("command done")
	return nil
}
