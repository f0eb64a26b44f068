package kovsctl

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// problems lists what is wrong or out of sync on a node, in words an operator can act on.
func problems(r NodeReport) []string {
	out := []string{}
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	switch {
	case !r.OVS.DatabaseOK:
		add("OVS database: %s", r.OVS.Error)
	case !r.OVS.BridgeOK:
		add("%s missing: %s", Bridge, r.OVS.Error)
	case !r.OVS.VswitchdOK:
		add("ovs-vswitchd does not answer: %s", r.OVS.Error)
	}
	if r.OVS.BridgeOK && !r.OVS.TunnelOK {
		add("tunnel port %s is missing or has no OpenFlow port", tunnelPortName)
	}
	if r.OVS.BridgeOK && !r.OVS.GatewayOK {
		add("gateway port %s is missing or has no OpenFlow port", gatewayPortName)
	}
	if r.OVS.VswitchdOK && r.OVS.Flows == 0 {
		add("%s has no kovs flows", Bridge)
	}
	a := r.Agent
	if a == nil {
		add("agent: %s", r.AgentError)
		return out
	}
	for _, c := range a.Checks {
		if !c.OK {
			add("agent not ready: %s: %s", c.Name, c.Message)
		}
	}
	if !a.Live {
		add("agent not alive (a loop is wedged)")
	}
	if r.OVS.VswitchdOK && a.Flows.Installed != r.OVS.Flows {
		add("flows out of sync: the agent installed %d, br-int has %d kovs flows", a.Flows.Installed, r.OVS.Flows)
	}
	if a.Flows.InstalledGeneration < a.Flows.DesiredGeneration {
		add("flow sync behind: state generation %d, installed %d", a.Flows.DesiredGeneration, a.Flows.InstalledGeneration)
	}
	have := make([]string, 0, len(a.Peers))
	for _, p := range a.Peers {
		have = append(have, p.Node)
	}
	rejected := map[string]string{}
	for _, p := range a.RejectedPeers {
		rejected[p.Node] = p.Reason
	}
	for _, n := range r.ExpectedPeers {
		switch why, bad := rejected[n]; {
		case slices.Contains(have, n):
		case bad:
			add("no tunnel peer for node %s: its Node record is unusable here: %s", n, why)
		default:
			add("no tunnel peer for node %s", n)
		}
	}
	if p := a.Policy; p != nil && p.Received && p.RealizedGeneration < p.ReceivedGeneration {
		add("NetworkPolicy behind: received generation %d, realized %d", p.ReceivedGeneration, p.RealizedGeneration)
	}
	return out
}

// Print writes the status as a table, then every problem, one a line.
func (s *Status) Print(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tAGENT\tOVS\tFLOWS\tPODS\tPEERS\tCONTROLLER\tPOLICY")
	for _, r := range s.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Node, agentCell(r), ovsCell(r.OVS), flowsCell(r),
			podsCell(r), peersCell(r), controllerCell(r), policyCell(r))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range s.Nodes {
		for _, p := range r.Problems {
			fmt.Fprintf(w, "%s: %s\n", r.Node, p)
		}
	}
	return nil
}

// PrintJSON writes the status as indented JSON.
func (s *Status) PrintJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

func agentCell(r NodeReport) string {
	switch {
	case r.Agent == nil:
		return "unreachable"
	case !r.Agent.Live:
		return "wedged"
	case r.Agent.Ready:
		return "ready"
	}
	return "not-ready"
}

func ovsCell(o OVSReport) string {
	switch {
	case !o.DatabaseOK:
		return "no-db"
	case !o.BridgeOK:
		return "no-bridge"
	case !o.VswitchdOK:
		return "vswitchd-down"
	case !o.TunnelOK || !o.GatewayOK:
		return "ports-down"
	}
	return "ok"
}

func flowsCell(r NodeReport) string {
	ovs := "-"
	if r.OVS.VswitchdOK {
		ovs = fmt.Sprint(r.OVS.Flows)
	}
	if r.Agent == nil {
		return "-/" + ovs
	}
	return fmt.Sprintf("%d/%s", r.Agent.Flows.Installed, ovs)
}

func podsCell(r NodeReport) string {
	if r.Agent == nil {
		return "-"
	}
	return fmt.Sprint(r.Agent.Pods)
}

func peersCell(r NodeReport) string {
	if r.Agent == nil {
		return fmt.Sprintf("-/%d", len(r.ExpectedPeers))
	}
	names := make([]string, 0, len(r.Agent.Peers))
	for _, p := range r.Agent.Peers {
		names = append(names, p.Node)
	}
	s := fmt.Sprintf("%d/%d", len(r.Agent.Peers), len(r.ExpectedPeers))
	if len(names) > 0 {
		s += " (" + strings.Join(names, ",") + ")"
	}
	return s
}

func controllerCell(r NodeReport) string {
	switch {
	case r.Agent == nil:
		return "-"
	case r.Agent.Policy == nil:
		return "not-configured"
	case r.Agent.Policy.Connected == nil:
		return "unknown"
	case *r.Agent.Policy.Connected:
		return "connected"
	}
	return "disconnected"
}

func policyCell(r NodeReport) string {
	if r.Agent == nil || r.Agent.Policy == nil {
		return "-"
	}
	p := r.Agent.Policy
	if !p.Received {
		return "none-received"
	}
	if p.RealizedGeneration < p.ReceivedGeneration {
		return fmt.Sprintf("behind: realized %d < received %d", p.RealizedGeneration, p.ReceivedGeneration)
	}
	return fmt.Sprintf("realized, %d rules", p.Rules)
}
