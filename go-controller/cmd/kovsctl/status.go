package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/kovs-net/kovs/go-controller/pkg/kovsctl"
)

// status runs `kovsctl status`; it exits 1 when any node has a problem.
func status(ctx context.Context, a kovsctl.Access, args []string) error {
	fs := flag.NewFlagSet("status", flag.ExitOnError)
	nodes := fs.String("node", "", "node, or comma-separated nodes")
	req := kovsctl.StatusRequest{}
	fs.StringVar(&req.AgentAddress, "agent-address", kovsctl.DefaultAgentAddress, "kovs-agent's --metrics-listen address as seen on the node")
	netns := fs.String("agent-netns", "", `network namespace the agent listens in ("{node}" = node name; in a sandbox: kovs-<name>-{node}); empty: this one`)
	output := fs.String("o", "table", "table or json")
	_ = fs.Parse(args)
	for _, n := range strings.Split(*nodes, ",") {
		if n = strings.TrimSpace(n); n != "" {
			req.Nodes = append(req.Nodes, n)
		}
	}
	if len(req.Nodes) == 0 {
		return fmt.Errorf("status: --node is required")
	}
	if *netns != "" {
		req.AgentNetNS = kovsctl.DirTemplate(*netns)
	}
	st, err := a.Status(ctx, req)
	if err != nil {
		return err
	}
	switch *output {
	case "json":
		err = st.PrintJSON(os.Stdout)
	case "table":
		err = st.Print(os.Stdout)
	default:
		return fmt.Errorf("status: -o %q: use table or json", *output)
	}
	if err != nil {
		return err
	}
	if !st.OK {
		os.Exit(1)
	}
	return nil
}
