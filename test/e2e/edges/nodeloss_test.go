package edges_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// checkNodeLoss is issue #27's node loss and deletion, on the node Egress IP failover
// left down (agent and OVS killed): its namespace is torn down (its pods' namespaces with
// it), then its Node and its pods are deleted, as an operator does with a dead machine.
// Then kovs-controller must have freed its block, every remaining agent must have dropped
// it as a tunnel peer, the Egress must be held by a remaining node, and no flow or group
// of a remaining node's br-int may name its tunnel address or an address of its block.
// Before the loss, the same checks must see the node (a peer, in flows) on every
// remaining node: the checks can fail.
func (c *edges) checkNodeLoss(t *testing.T) {
	if c.family != "ipv4" {
		t.Fatalf("the node loss check reads IPv4 flows; this sandbox is %s", c.family)
	}
	lost := ""
	for _, n := range []string{"node2", "node3"} {
		if !c.s.Layout.Running(n + "-kovs-agent") {
			lost = n
		}
	}
	if lost == "" {
		t.Fatal("no node is down: run this after Egress IP failover, which stops the holder's agent and OVS")
	}
	var remaining []string
	for _, n := range []string{"node1", "node2", "node3"} {
		if n != lost {
			remaining = append(remaining, n)
		}
	}
	ctx := context.Background()
	node, err := c.s.Client.CoreV1().Nodes().Get(ctx, lost, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	subnets, err := ipam.ParseNodeSubnetsAnnotation(node.Annotations[ipam.NodeSubnetsAnnotationKey])
	if err != nil {
		t.Fatalf("%s's %s: %v", lost, ipam.NodeSubnetsAnnotationKey, err)
	}
	tunnel := c.nodeAddr(t, lost, netip.MustParseAddr("10.0.0.1"))
	traces := append([]netip.Prefix{netip.PrefixFrom(tunnel, 32)}, subnets.Blocks()...)
	allocated, err := c.subnetsAllocated()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range remaining {
		if !c.hasPeer(t, n, lost) {
			t.Fatalf("before the loss, %s's agent does not list %s as a tunnel peer: the check below would prove nothing", n, lost)
		}
		if found := c.tracesIn(t, n, traces); len(found) == 0 {
			t.Fatalf("before the loss, no flow of %s names %s's tunnel address %s or its blocks %v: the check below would prove nothing", n, lost, tunnel, subnets.Blocks())
		}
	}

	if err := c.s.Layout.RemoveNode(lost); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.s.Client.CoreV1().Nodes().Delete(ctx, lost, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := c.s.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + lost})
	if err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	for _, p := range pods.Items {
		if err := c.s.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatalf("delete %s/%s of the lost node: %v", p.Namespace, p.Name, err)
		}
	}
	framework.Eventually(t, 60*time.Second, lost+" gone from the controller, the Egress and every remaining node", func() error {
		if now, err := c.subnetsAllocated(); err != nil || now != allocated-1 {
			return fmt.Errorf("kovs_node_subnets_allocated %d (%v), want %d: %s's block not freed", now, err, allocated-1, lost)
		}
		out, err := c.s.Kubectl("get", "egress", "eg", "-o", "jsonpath={.status.node}")
		if holder := strings.TrimSpace(out); err != nil || holder == "" || holder == lost {
			return fmt.Errorf("the Egress is held by %q (%v)", holder, err)
		}
		for _, n := range remaining {
			if c.hasPeer(t, n, lost) {
				return fmt.Errorf("%s's agent still lists %s as a tunnel peer", n, lost)
			}
			if found := c.tracesIn(t, n, traces); len(found) > 0 {
				return fmt.Errorf("%s's br-int still names %s:\n%s", n, lost, strings.Join(found[:min(len(found), 5)], "\n"))
			}
		}
		return nil
	})
	t.Logf("%s torn down and deleted (%d pods with it): its block %v freed, no peer, flow or group of it left on %v, %s after the delete",
		lost, len(pods.Items), subnets.Blocks(), remaining, time.Since(start).Round(time.Millisecond))
}

// hasPeer reports whether node's agent lists peer as a tunnel peer (its /status).
func (c *edges) hasPeer(t *testing.T, node, peer string) bool {
	t.Helper()
	st, err := c.s.AgentStatus(node)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Peers {
		if p.Node == peer {
			return true
		}
	}
	return false
}

var ipv4InFlow = regexp.MustCompile(`\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}(/\d{1,2})?\b`)

// tracesIn lists the flows and groups of node's br-int that name an address or a prefix
// within one of traces (a prefix that merely contains one, as the cluster CIDR contains
// every node block, is no trace).
func (c *edges) tracesIn(t *testing.T, node string, traces []netip.Prefix) []string {
	t.Helper()
	var texts []string
	for _, f := range c.s.DumpFlows(t, node) {
		texts = append(texts, f.Text)
	}
	for id, g := range c.s.DumpGroups(t, node) {
		texts = append(texts, fmt.Sprintf("group %d: %s", id, g))
	}
	var found []string
	for _, text := range texts {
		for _, m := range ipv4InFlow.FindAllString(text, -1) {
			p, err := netip.ParsePrefix(m)
			if err != nil {
				a, aerr := netip.ParseAddr(m)
				if aerr != nil {
					continue
				}
				p = netip.PrefixFrom(a, 32)
			}
			if within(p, traces) {
				found = append(found, text)
				break
			}
		}
	}
	return found
}

func within(p netip.Prefix, traces []netip.Prefix) bool {
	for _, tr := range traces {
		if p.Bits() >= tr.Bits() && tr.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// subnetsAllocated is kovs-controller's kovs_node_subnets_allocated (nodes holding a
// block), summed over its cluster CIDRs.
func (c *edges) subnetsAllocated() (int, error) {
	st, err := c.s.Layout.LoadState()
	if err != nil {
		return 0, err
	}
	url := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(st.MetricsPort)) + "/metrics"
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return 0, err
	}
	total, seen := 0, false
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "kovs_node_subnets_allocated{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", url, line, err)
		}
		total += int(v)
		seen = true
	}
	if !seen {
		return 0, fmt.Errorf("%s: no kovs_node_subnets_allocated", url)
	}
	return total, nil
}
