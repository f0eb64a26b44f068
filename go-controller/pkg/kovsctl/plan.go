package kovsctl

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

// PlanRequest is an address plan to check: the cluster CIDRs with their block sizes
// (one per family), the Service CIDRs and node networks it must stay clear of, and the
// nodes' max pods (kubelet's maxPods; 0: unknown).
type PlanRequest struct {
	Cluster  []ipam.ClusterCIDR
	Services []netip.Prefix
	Nodes    []ipam.Range // node networks or node addresses
	MaxPods  int
	// NodeBlocks and NodeMaxPods are a live cluster's nodes: their blocks and max pods.
	NodeBlocks  map[string][]netip.Prefix
	NodeMaxPods map[string]int
}

// PlanReport is the arithmetic of a plan and what is wrong with it.
type PlanReport struct {
	Families []ipam.FamilyPlan
	Overlaps []ipam.Overlap
	// Oversized names nodes whose max pods exceed what their block holds.
	Oversized []string
}

// ParsePlan builds a request from kovsctl plan's flags: comma-separated lists, block
// sizes in the order of the cluster CIDRs (a missing one is the family's default).
func ParsePlan(clusterCIDRs, blockSizes, serviceCIDRs, nodeCIDRs string, maxPods int) (PlanRequest, error) {
	var req PlanRequest
	blocks := splitList(blockSizes)
	for i, c := range splitList(clusterCIDRs) {
		bits := 0
		if i < len(blocks) {
			b, err := strconv.Atoi(strings.TrimPrefix(blocks[i], "/"))
			if err != nil {
				return req, fmt.Errorf("--block-size %q: want a prefix length such as 24", blocks[i])
			}
			bits = b
		}
		cc, err := ipam.ParseClusterCIDR(c, bits)
		if err != nil {
			return req, fmt.Errorf("--cluster-cidr: %w", err)
		}
		if slices.ContainsFunc(req.Cluster, func(o ipam.ClusterCIDR) bool { return o.Family() == cc.Family() }) {
			return req, fmt.Errorf("--cluster-cidr: at most one %s CIDR", cc.Family())
		}
		req.Cluster = append(req.Cluster, cc)
	}
	if len(req.Cluster) == 0 {
		return req, fmt.Errorf("--cluster-cidr is required (e.g. 10.244.0.0/16,fd00:10:244::/48), or give no flags to read the live cluster")
	}
	if len(blocks) > len(req.Cluster) {
		return req, fmt.Errorf("--block-size has %d values for %d cluster CIDRs", len(blocks), len(req.Cluster))
	}
	for _, s := range splitList(serviceCIDRs) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return req, fmt.Errorf("--service-cidr %q: %w", s, err)
		}
		req.Services = append(req.Services, p.Masked())
	}
	for _, s := range splitList(nodeCIDRs) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return req, fmt.Errorf("--node-cidr %q: %w", s, err)
		}
		req.Nodes = append(req.Nodes, ipam.Range{Name: "node network", Prefix: p.Masked()})
	}
	if maxPods < 0 {
		return req, fmt.Errorf("--max-pods %d: want 0 (unknown) or more", maxPods)
	}
	req.MaxPods = maxPods
	return req, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// Plan does the arithmetic and finds every overlap among the ranges given.
func Plan(req PlanRequest) PlanReport {
	var rep PlanReport
	ranges := []ipam.Range{}
	for _, c := range req.Cluster {
		rep.Families = append(rep.Families, ipam.PlanFamily(c, req.MaxPods))
		ranges = append(ranges, ipam.Range{Name: c.Family().String() + " cluster CIDR", Prefix: c.CIDR})
	}
	for _, s := range req.Services {
		ranges = append(ranges, ipam.Range{Name: "Service CIDR", Prefix: s})
	}
	ranges = append(ranges, req.Nodes...)
	rep.Overlaps = ipam.Overlaps(ranges)
	rep.Oversized = ipam.OversizedMaxPods(req.NodeMaxPods, req.NodeBlocks)
	return rep
}

// Print writes the report for people.
func (r PlanReport) Print(w io.Writer) {
	for _, f := range r.Families {
		fmt.Fprintf(w, "%s: cluster CIDR %s, /%d node blocks\n", f.Family, f.Cluster.CIDR, f.Cluster.BlockBits)
		fmt.Fprintf(w, "  node cap        %s nodes\n", count(f.NodeCap, false))
		fmt.Fprintf(w, "  block holds     %s pods\n", count(f.BlockPods, f.BlockPods >= 1<<63))
		binds := "the block binds"
		if f.BoundBy == "max pods" {
			binds = "max pods binds"
		}
		fmt.Fprintf(w, "  pods per node   %s (%s)\n", count(f.PodsPerNode, f.PodsPerNode >= 1<<63), binds)
		fmt.Fprintf(w, "  pod capacity    %s\n", count(f.PodCapacity, f.Saturated))
	}
	if len(r.Families) == 2 {
		a, b := r.Families[0], r.Families[1]
		nodes, pods := min(a.NodeCap, b.NodeCap), min(a.PodsPerNode, b.PodsPerNode)
		fmt.Fprintf(w, "dual-stack: %s nodes, %s pods per node, %s pods (every pod and node needs both families)\n",
			count(nodes, false), count(pods, pods >= 1<<63), count(mulSaturated(nodes, pods)))
	}
	if len(r.Overlaps) == 0 {
		fmt.Fprintln(w, "overlaps: none")
	}
	for _, o := range r.Overlaps {
		fmt.Fprintf(w, "OVERLAP: %s\n", o)
	}
	for _, n := range r.Oversized {
		fmt.Fprintf(w, "MAX PODS EXCEED THE BLOCK: %s\n", n)
	}
}

func mulSaturated(a, b uint64) (uint64, bool) {
	if a != 0 && b > math.MaxUint64/a {
		return math.MaxUint64, true
	}
	return a * b, false
}

// OK reports whether the plan has no overlaps and no oversized nodes.
func (r PlanReport) OK() bool { return len(r.Overlaps) == 0 && len(r.Oversized) == 0 }

// count prints n with thousands separators, "more than 2^63" when saturated.
func count(n uint64, saturated bool) string {
	if saturated {
		return "more than 9,223,372,036,854,775,807 (2^63)"
	}
	s := strconv.FormatUint(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// LivePlan reads the live cluster's plan: the cluster CIDRs and block sizes from the
// ConfigMap kube-system/kovs-config (dist's), the Service CIDRs from the ServiceCIDR
// objects, every node's addresses, blocks (kovs.io/node-subnets) and max pods (its pod
// capacity, which kubelet sets to its maxPods).
func (a Access) LivePlan(ctx context.Context) (PlanRequest, error) {
	cm, err := a.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, "kovs-config", metav1.GetOptions{})
	if err != nil {
		return PlanRequest{}, fmt.Errorf("read the plan from kube-system/kovs-config (or give --cluster-cidr): %w", err)
	}
	var blocks []string
	for _, c := range splitList(cm.Data["cluster-cidrs"]) {
		key := "ipv4-block-size"
		if strings.Contains(c, ":") {
			key = "ipv6-block-size"
		}
		blocks = append(blocks, orDefault(cm.Data[key], "0"))
	}
	req, err := ParsePlan(cm.Data["cluster-cidrs"], strings.Join(blocks, ","), "", "", 0)
	if err != nil {
		return req, fmt.Errorf("kube-system/kovs-config: %w", err)
	}
	scs, err := a.Client.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return req, fmt.Errorf("list ServiceCIDRs: %w", err)
	}
	if err == nil {
		for _, sc := range scs.Items {
			for _, c := range sc.Spec.CIDRs {
				if p, err := netip.ParsePrefix(c); err == nil {
					req.Services = append(req.Services, p.Masked())
				}
			}
		}
	}
	nodes, err := a.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return req, fmt.Errorf("list nodes: %w", err)
	}
	req.NodeBlocks, req.NodeMaxPods = map[string][]netip.Prefix{}, map[string]int{}
	for _, n := range nodes.Items {
		addLiveNode(&req, &n)
	}
	return req, nil
}

func addLiveNode(req *PlanRequest, n *corev1.Node) {
	for _, addr := range n.Status.Addresses {
		if addr.Type != corev1.NodeInternalIP && addr.Type != corev1.NodeExternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(addr.Address); err == nil {
			req.Nodes = append(req.Nodes, ipam.Range{Name: "node " + n.Name, Prefix: netip.PrefixFrom(ip, ip.BitLen())})
		}
	}
	if ann, err := ipam.ParseNodeSubnetsAnnotation(n.Annotations[ipam.NodeSubnetsAnnotationKey]); err == nil {
		req.NodeBlocks[n.Name] = ann.Blocks()
	}
	if q, ok := n.Status.Capacity[corev1.ResourcePods]; ok {
		req.NodeMaxPods[n.Name] = int(q.Value())
		req.MaxPods = max(req.MaxPods, int(q.Value()))
	}
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
