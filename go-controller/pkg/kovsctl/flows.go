package kovsctl

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// FlowsRequest filters `kovsctl flows`.
type FlowsRequest struct {
	Node  string
	Table string // table name (or number)
	Pod   string // ns/name: only that pod's flows
}

// Flows prints the node's br-int flows grouped under their table's name, with counters.
func (a Access) Flows(ctx context.Context, req FlowsRequest, w io.Writer) error {
	o, err := a.connect(ctx, req.Node)
	if err != nil {
		return err
	}
	defer o.Close()
	var cookie, mask uint64
	if req.Pod != "" {
		ofport, err := a.podPortOn(ctx, o, req.Pod)
		if err != nil {
			return err
		}
		f := pipeline.ObjectFilter(pipeline.CategoryPod, uint32(ofport))
		cookie, mask = uint64(f.Value), uint64(f.Mask)
	}
	flows, err := o.of.DumpFlows(ctx, cookie, mask)
	if err != nil {
		return err
	}
	sort.SliceStable(flows, func(i, j int) bool {
		if flows[i].Table != flows[j].Table {
			return flows[i].Table < flows[j].Table
		}
		return flows[i].Priority > flows[j].Priority
	})
	last := -1
	for _, f := range flows {
		name := tableName(f.Table)
		if req.Table != "" && !strings.EqualFold(req.Table, name) && req.Table != fmt.Sprint(f.Table) {
			continue
		}
		if f.Table != last {
			fmt.Fprintf(w, "\n# table %d %s\n", f.Table, name)
			last = f.Table
		}
		fmt.Fprintf(w, "  n_packets=%-8d %s\n", f.Packets, f.String())
	}
	return nil
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
