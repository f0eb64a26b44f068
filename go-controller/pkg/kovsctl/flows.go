package kovsctl

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// FlowsRequest filters `kovsctl flows`.
type FlowsRequest struct {
	Node   string
	Table  string // table name (or number)
	Pod    string // ns/name: only the flows that concern that pod (see podFlows)
	Policy string // ns/name: only that NetworkPolicy's flows (see policyFlows)
}

// Flows prints the node's br-int flows grouped under their table's name, with counters.
func (a Access) Flows(ctx context.Context, req FlowsRequest, w io.Writer) error {
	o, err := a.connect(ctx, req.Node)
	if err != nil {
		return err
	}
	defer o.Close()
	flows, err := a.selectFlows(ctx, o, req)
	if err != nil {
		return err
	}
	if len(flows) == 0 {
		fmt.Fprintf(w, "no flow of %s's %s matches\n", req.Node, Bridge)
		return nil
	}
	last := -1
	for _, f := range flows {
		if f.Table != last {
			fmt.Fprintf(w, "\n# table %d %s\n", f.Table, tableName(f.Table))
			last = f.Table
		}
		fmt.Fprintf(w, "  n_packets=%-8d %s\n", f.Packets, f.String())
	}
	return nil
}

// selectFlows dumps br-int and keeps the flows the request asks for, by table and, within
// a table, by falling priority.
func (a Access) selectFlows(ctx context.Context, o *nodeOVS, req FlowsRequest) ([]ovs.FlowEntry, error) {
	all, err := o.of.DumpFlows(ctx, 0, 0)
	if err != nil {
		return nil, err
	}
	var keep []func(ovs.FlowEntry) bool
	if req.Table != "" {
		keep = append(keep, func(f ovs.FlowEntry) bool {
			return strings.EqualFold(req.Table, tableName(f.Table)) || req.Table == fmt.Sprint(f.Table)
		})
	}
	if req.Pod != "" {
		sel, err := a.podSelection(ctx, o, req.Pod)
		if err != nil {
			return nil, err
		}
		keep = append(keep, sel.selects)
	}
	if req.Policy != "" {
		sel, err := a.policySelection(ctx, o, req.Policy, all)
		if err != nil {
			return nil, err
		}
		keep = append(keep, sel.selects)
	}
	var flows []ovs.FlowEntry
	for _, f := range all {
		if !slices.ContainsFunc(keep, func(k func(ovs.FlowEntry) bool) bool { return !k(f) }) {
			flows = append(flows, f)
		}
	}
	sort.SliceStable(flows, func(i, j int) bool {
		if flows[i].Table != flows[j].Table {
			return flows[i].Table < flows[j].Table
		}
		return flows[i].Priority > flows[j].Priority
	})
	return flows, nil
}

func tableName(id int) string {
	if id >= 0 && id < 256 {
		if t, ok := pipeline.TableByID(uint8(id)); ok {
			return t.Name
		}
	}
	return fmt.Sprintf("table%d", id)
}

func (a Access) podPortOn(ctx context.Context, o *nodeOVS, key string) (int, error) {
	ns, name, ok := strings.Cut(key, "/")
	if !ok {
		return 0, fmt.Errorf("pod %q: write it as NAMESPACE/NAME", key)
	}
	ports, err := o.db.FindPorts(ctx, Bridge, "iface-id", ns+"_"+name)
	if err != nil {
		return 0, err
	}
	for _, p := range ports {
		if p.Ofport > 0 {
			return p.Ofport, nil
		}
	}
	return 0, fmt.Errorf("pod %s has no port on this node's %s", key, Bridge)
}

// Pods prints the node's pod ports: OVS port, ofport, pod identity and addresses.
func (a Access) Pods(ctx context.Context, node string, w io.Writer) error {
	o, err := a.connect(ctx, node)
	if err != nil {
		return err
	}
	defer o.Close()
	ports, err := o.db.FindPorts(ctx, Bridge, "kovs.io/owner", "pod")
	if err != nil {
		return err
	}
	sort.Slice(ports, func(i, j int) bool { return ports[i].Ofport < ports[j].Ofport })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tPORT\tOFPORT\tADDRESSES\tMAC\tUID\tSANDBOX")
	for _, p := range ports {
		ids := p.ExternalIDs
		sandbox := ids["kovs.io/sandbox"]
		if len(sandbox) > 12 {
			sandbox = sandbox[:12]
		}
		fmt.Fprintf(tw, "%s/%s\t%s\t%d\t%s\t%s\t%s\t%s\n", ids["kovs.io/pod-namespace"], ids["kovs.io/pod-name"], p.Name, p.Ofport,
			ids["kovs.io/ip-addresses"], ids["kovs.io/mac"], ids["kovs.io/pod-uid"], sandbox)
	}
	return tw.Flush()
}
