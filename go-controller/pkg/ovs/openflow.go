package ovs

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
)

// FlowClient programs the flows and groups of one bridge. *OpenFlow
// implements it, and so does *ovsfake.OpenFlow (package ovs/ovsfake) for unit tests.
type FlowClient interface {
	// Bundle applies mods, in order, as one atomic transaction: all or none.
	Bundle(ctx context.Context, mods []Mod) error
	// DumpFlows lists the flows whose cookie matches cookie under mask (all
	// flows for mask 0).
	DumpFlows(ctx context.Context, cookie, mask uint64) ([]FlowEntry, error)
	// DeleteFlows deletes the flows whose cookie matches cookie under mask.
	DeleteFlows(ctx context.Context, cookie, mask uint64) error
	// DumpGroups lists the groups.
	DumpGroups(ctx context.Context) ([]GroupEntry, error)
	// CountFlows counts the flows whose cookie matches cookie under mask (all flows
	// for mask 0), without listing them.
	CountFlows(ctx context.Context, cookie, mask uint64) (int, error)
}

// OpenFlowConfig says how to reach one bridge.
type OpenFlowConfig struct {
	// Bridge is the bridge's name, e.g. "br-int".
	Bridge string
	// RunDir is ovs-vswitchd's OVS_RUNDIR. With it, the target is the bridge's
	// management socket unix:<RunDir>/<Bridge>.mgmt and ovs-appctl looks for
	// ovs-vswitchd there; without it, ovs-ofctl and ovs-appctl use their defaults.
	RunDir string
	// Target overrides the ovs-ofctl target, e.g. "unix:/run/kovs/br-int.mgmt".
	Target string
	// VswitchdCtl is ovs-vswitchd's unixctl socket (its --unixctl path), for
	// ofproto/trace. Default: found through the pidfile in RunDir.
	VswitchdCtl string
	// VswitchdLocate, when set, finds ovs-vswitchd's unixctl socket again before every
	// ovs-appctl command (VswitchdConfig.Locate); its "" means VswitchdCtl.
	VswitchdLocate func() string
	// Protocol is the OpenFlow version ovs-ofctl speaks (default OpenFlow15);
	// the bridge's protocols column must include it.
	Protocol string
	// OfctlPath and AppctlPath default to "ovs-ofctl" and "ovs-appctl".
	OfctlPath  string
	AppctlPath string
	// Exec runs the commands; default OSExec.
	Exec Exec
	// Logger defaults to the logrus standard logger.
	Logger *logrus.Entry
	// PrestartBundles keeps one `ovs-ofctl bundle` process started ahead, waiting for its
	// bundle, so that Bundle does not wait for ovs-ofctl to load: about 5 ms of each
	// bundle here, most of what a pod's flows cost. For a long-running client, which
	// calls Close when done; it needs an Exec that is a Starter (OSExec is), and is
	// ignored otherwise.
	PrestartBundles bool
	// PrestartDelay is how long after a bundle the next process starts, so that its start
	// does not take the CPU from what follows the bundle (in kovs-agent, the rest of a
	// pod's CNI ADD). A bundle that comes sooner runs ovs-ofctl whole.
	PrestartDelay time.Duration
}

// OpenFlow programs one bridge through ovs-ofctl, with flows and groups as text
// in ovs-ofctl syntax. It keeps no state besides its configuration and is safe
// for concurrent use (ovs-vswitchd serializes the bundles).
type OpenFlow struct {
	bridge   string
	target   string
	protocol string
	ofctl    string
	exec     Exec
	vswitchd *Vswitchd
	log      *logrus.Entry
	// bundles is the bundle process started ahead; nil without PrestartBundles.
	bundles *prestarted
}

var _ FlowClient = (*OpenFlow)(nil)

// NewOpenFlow returns a client for the bridge cfg names.
func NewOpenFlow(cfg OpenFlowConfig) (*OpenFlow, error) {
	if cfg.Bridge == "" {
		return nil, errors.New("openflow client: no bridge")
	}
	c := &OpenFlow{
		bridge:   cfg.Bridge,
		target:   cfg.Target,
		protocol: orDefault(cfg.Protocol, "OpenFlow15"),
		ofctl:    orDefault(cfg.OfctlPath, "ovs-ofctl"),
		exec:     cfg.Exec,
		log:      cfg.Logger,
	}
	if c.exec == nil {
		c.exec = OSExec{}
	}
	if c.log == nil {
		c.log = logrus.NewEntry(logrus.StandardLogger())
	}
	c.log = c.log.WithField("bridge", cfg.Bridge)
	switch {
	case c.target != "":
	case cfg.RunDir != "":
		c.target = "unix:" + filepath.Join(cfg.RunDir, cfg.Bridge+".mgmt")
	default:
		c.target = cfg.Bridge
	}
	c.vswitchd = NewVswitchd(VswitchdConfig{Ctl: cfg.VswitchdCtl, Locate: cfg.VswitchdLocate, RunDir: cfg.RunDir, AppctlPath: cfg.AppctlPath, Exec: c.exec})
	if starter, ok := c.exec.(Starter); ok && cfg.PrestartBundles {
		c.bundles = newPrestarted(starter, c.bundleCommand(nil), cfg.PrestartDelay, c.log)
	}
	return c, nil
}

// Close stops the bundle process started ahead, if any. Bundle still works after it,
// starting ovs-ofctl per call.
func (c *OpenFlow) Close() {
	if c.bundles != nil {
		c.bundles.close()
	}
}

// BundleProcessReady reports whether a bundle process started ahead (PrestartBundles) is
// loaded and waiting: the next Bundle then goes through it, not through a fresh
// ovs-ofctl. A process that has started but is not yet handed over does not count.
func (c *OpenFlow) BundleProcessReady() bool {
	return c.bundles != nil && c.bundles.ready()
}

// Bridge is the bridge the client programs.
func (c *OpenFlow) Bridge() string { return c.bridge }

// Target is the ovs-ofctl target of the bridge.
func (c *OpenFlow) Target() string { return c.target }

// Bundle applies mods, in order, as one atomic OpenFlow bundle (ovs-ofctl
// bundle, from standard input): if any mod fails, none is applied. Ports and
// tables are numbers in mods (reserved ports such as LOCAL by name). The error
// is then a *BundleError naming the failing line when it can be told.
func (c *OpenFlow) Bundle(ctx context.Context, mods []Mod) error {
	if len(mods) == 0 {
		return nil
	}
	text, err := BundleText(mods)
	if err != nil {
		return fmt.Errorf("bundle on bridge %s: %w", c.bridge, err)
	}
	start := time.Now()
	cmd := c.bundleCommand([]byte(text))
	var p Started
	if c.bundles != nil {
		p = c.bundles.take()
		defer c.bundles.refill()
	}
	if p != nil {
		_, err = finish(ctx, p, cmd)
	} else {
		_, err = run(ctx, c.exec, cmd)
	}
	if err != nil {
		return newBundleError(c.bridge, text, err)
	}
	c.log.WithFields(logrus.Fields{"mods": len(mods), "elapsed": time.Since(start)}).Debug("applied openflow bundle")
	return nil
}

// bundleCommand is the ovs-ofctl run that applies the bundle text from standard input.
// --no-names: kovs's flows and groups name ports and tables by number only, and without
// it ovs-ofctl asks the switch for every port's and table's name before it parses the
// bundle (the table features alone cost more than the bundle).
func (c *OpenFlow) bundleCommand(text []byte) Command {
	return c.command(text, "--no-names", "bundle", c.target, "-")
}

// DumpFlows lists the flows whose cookie matches cookie under mask; mask 0
// lists every flow.
func (c *OpenFlow) DumpFlows(ctx context.Context, cookie, mask uint64) ([]FlowEntry, error) {
	args := []string{"--no-names", "dump-flows", c.target}
	if mask != 0 {
		args = append(args, fmt.Sprintf("cookie=%#x/%#x", cookie, mask))
	}
	out, err := c.run(ctx, nil, args...)
	if err != nil {
		return nil, fmt.Errorf("dump flows of bridge %s: %w", c.bridge, err)
	}
	flows, err := ParseFlowDump(out)
	if err != nil {
		return nil, fmt.Errorf("dump flows of bridge %s: %w", c.bridge, err)
	}
	return flows, nil
}

// CountFlows counts the flows whose cookie matches cookie under mask (mask 0: every
// flow) with dump-aggregate: ovs-vswitchd counts them and sends one number, so however
// many flows there are, nothing is formatted, sent or parsed per flow.
func (c *OpenFlow) CountFlows(ctx context.Context, cookie, mask uint64) (int, error) {
	args := []string{"dump-aggregate", c.target}
	if mask != 0 {
		args = append(args, fmt.Sprintf("cookie=%#x/%#x", cookie, mask))
	}
	out, err := c.run(ctx, nil, args...)
	if err != nil {
		return 0, fmt.Errorf("count flows of bridge %s: %w", c.bridge, err)
	}
	n, err := ParseAggregateFlowCount(out)
	if err != nil {
		return 0, fmt.Errorf("count flows of bridge %s: %w", c.bridge, err)
	}
	return n, nil
}

// ParseAggregateFlowCount reads the flow count of an aggregate stats reply as ovs-ofctl
// dump-aggregate prints it ("OFPST_AGGREGATE reply (OF1.5) (xid=0x2): packet_count=0
// byte_count=0 flow_count=12").
func ParseAggregateFlowCount(out string) (int, error) {
	for _, field := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(field, "flow_count="); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return 0, fmt.Errorf("aggregate reply %q: flow_count %q is no count", strings.TrimSpace(out), v)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("aggregate reply %q has no flow_count", strings.TrimSpace(out))
}

// DeleteFlows deletes, in one bundle, the flows whose cookie matches cookie
// under mask. A zero mask, which would delete every flow, is refused.
func (c *OpenFlow) DeleteFlows(ctx context.Context, cookie, mask uint64) error {
	if mask == 0 {
		return fmt.Errorf("delete flows of bridge %s: refusing a zero cookie mask, which matches every flow", c.bridge)
	}
	return c.Bundle(ctx, []Mod{DeleteFlowsByCookie(cookie, mask)})
}

// DumpGroups lists the groups of the bridge.
func (c *OpenFlow) DumpGroups(ctx context.Context) ([]GroupEntry, error) {
	out, err := c.run(ctx, nil, "--no-names", "dump-groups", c.target)
	if err != nil {
		return nil, fmt.Errorf("dump groups of bridge %s: %w", c.bridge, err)
	}
	groups, err := ParseGroupDump(out)
	if err != nil {
		return nil, fmt.Errorf("dump groups of bridge %s: %w", c.bridge, err)
	}
	return groups, nil
}

// Trace runs ofproto/trace of flow (e.g. "in_port=3,tcp,nw_src=...,nw_dst=...")
// through the bridge and returns ovs-vswitchd's report. extra are further
// ofproto/trace arguments, e.g. "--ct-next", "trk,new".
func (c *OpenFlow) Trace(ctx context.Context, flow string, extra ...string) (string, error) {
	return c.vswitchd.Trace(ctx, c.bridge, flow, extra...)
}

// Vswitchd is the ovs-appctl client of the ovs-vswitchd that runs the bridge.
func (c *OpenFlow) Vswitchd() *Vswitchd { return c.vswitchd }

// run runs ovs-ofctl -O <protocol> args.
func (c *OpenFlow) run(ctx context.Context, stdin []byte, args ...string) (string, error) {
	return run(ctx, c.exec, c.command(stdin, args...))
}

// command is the ovs-ofctl -O <protocol> args command.
func (c *OpenFlow) command(stdin []byte, args ...string) Command {
	return Command{Path: c.ofctl, Args: append([]string{"-O", c.protocol}, args...), Stdin: stdin}
}

func orDefault(v, def string) string {
	if strings.TrimSpace(v) == "" {
		return def
	}
	return v
}
