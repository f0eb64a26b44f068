package ovs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// VswitchdConfig says how to reach ovs-vswitchd's unixctl server.
type VswitchdConfig struct {
	// Ctl is the ovs-appctl -t target: the unixctl socket path ovs-vswitchd
	// was started with (--unixctl), or a daemon name. Default "ovs-vswitchd",
	// which ovs-appctl resolves through the pidfile in RunDir.
	Ctl string
	// Locate, when set, finds the target again before every command; its "" means Ctl.
	// For a socket named after ovs-vswitchd's pid (ovs-ctl's layout), which another
	// path replaces each time ovs-vswitchd restarts.
	Locate func() string
	// RunDir is ovs-vswitchd's OVS_RUNDIR; "" for the OVS default.
	RunDir string
	// AppctlPath defaults to "ovs-appctl".
	AppctlPath string
	// Exec runs the commands; default OSExec.
	Exec Exec
}

// Vswitchd runs ovs-appctl commands against one ovs-vswitchd.
type Vswitchd struct {
	ctl    string
	locate func() string
	rundir string
	appctl string
	exec   Exec
}

// NewVswitchd returns a client of the ovs-vswitchd cfg names.
func NewVswitchd(cfg VswitchdConfig) *Vswitchd {
	v := &Vswitchd{
		ctl:    orDefault(cfg.Ctl, "ovs-vswitchd"),
		locate: cfg.Locate,
		rundir: cfg.RunDir,
		appctl: orDefault(cfg.AppctlPath, "ovs-appctl"),
		exec:   cfg.Exec,
	}
	if v.exec == nil {
		v.exec = OSExec{}
	}
	return v
}

// Trace runs `ofproto/trace <bridge> <flow> [extra...]` and returns the report:
// the tables the packet went through, the actions, and the datapath actions.
func (v *Vswitchd) Trace(ctx context.Context, bridge, flow string, extra ...string) (string, error) {
	if bridge == "" || strings.TrimSpace(flow) == "" {
		return "", errors.New("ofproto/trace: needs a bridge and a flow")
	}
	args := append([]string{"ofproto/trace", bridge, flow}, extra...)
	out, err := v.run(ctx, args...)
	if err != nil {
		return "", fmt.Errorf("trace %q on bridge %s: %w", flow, bridge, err)
	}
	return out, nil
}

// TunnelNeighborSet seeds ovs-vswitchd's tunnel neighbour cache: the userspace
// datapath resolves a tunnel's next hop itself, from ARP and ND replies it
// sees on bridge, and drops what it sends before that. bridge is the bridge
// that holds the tunnel endpoint address (the uplink bridge).
func (v *Vswitchd) TunnelNeighborSet(ctx context.Context, bridge string, ip netip.Addr, mac net.HardwareAddr) error {
	if bridge == "" || !ip.IsValid() || len(mac) != 6 {
		return fmt.Errorf("tnl/neigh/set: needs a bridge, an IP and a MAC (got %q, %v, %v)", bridge, ip, mac)
	}
	if _, err := v.run(ctx, "tnl/neigh/set", bridge, ip.Unmap().String(), mac.String()); err != nil {
		return fmt.Errorf("set tunnel neighbor %s at %s on bridge %s: %w", ip, mac, bridge, err)
	}
	return nil
}

// run runs ovs-appctl -t <ctl> args.
func (v *Vswitchd) run(ctx context.Context, args ...string) (string, error) {
	cmd := Command{Path: v.appctl, Args: append([]string{"-t", v.Ctl()}, args...)}
	if v.rundir != "" {
		cmd.Env = []string{"OVS_RUNDIR=" + v.rundir}
	}
	return run(ctx, v.exec, cmd)
}

// Ctl is the ovs-appctl -t target now.
func (v *Vswitchd) Ctl() string {
	if v.locate != nil {
		if ctl := v.locate(); ctl != "" {
			return ctl
		}
	}
	return v.ctl
}

// Version is ovs-vswitchd's answer to `version`: "ovs-vswitchd (Open vSwitch) 3.1.0".
func (v *Vswitchd) Version(ctx context.Context) (string, error) {
	out, err := v.run(ctx, "version")
	if err != nil {
		return "", fmt.Errorf("ovs-vswitchd version: %w", err)
	}
	return strings.TrimSpace(out), nil
}

// PurgeDatapathFlows removes every cached datapath flow (revalidator/purge): the next
// packets are classified again against the OpenFlow tables.
func (v *Vswitchd) PurgeDatapathFlows(ctx context.Context) error {
	if _, err := v.run(ctx, "revalidator/purge"); err != nil {
		return fmt.Errorf("purge datapath flows: %w", err)
	}
	return nil
}

// FlushConntrack removes the conntrack entries of zone whose IP protocol is ipProto (132:
// SCTP); ipProto 0 flushes the whole zone.
func (v *Vswitchd) FlushConntrack(ctx context.Context, zone uint16, ipProto uint8) error {
	args := []string{"dpctl/flush-conntrack", fmt.Sprintf("zone=%d", zone)}
	if ipProto != 0 {
		args = append(args, fmt.Sprintf("ct_nw_proto=%d", ipProto))
	}
	if _, err := v.run(ctx, args...); err != nil {
		return fmt.Errorf("flush conntrack zone %d, IP protocol %d: %w", zone, ipProto, err)
	}
	return nil
}
