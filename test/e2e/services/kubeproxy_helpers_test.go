package services_test

import (
	"fmt"
	"maps"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// kubeProxyFixture is the sandbox of TestServicesKubeProxy and what it created.
type kubeProxyFixture struct {
	s      *framework.Sandbox
	ns     string
	web    []*corev1.Pod // web-1 on node1, web-2 on node2
	client *corev1.Pod   // on node1
	svc    *corev1.Service
	vip    netip.Addr
}

// backends are the responder identities of the Service's backends.
func (k *kubeProxyFixture) backends() []string { return podKeys(k.web...) }

// waitAnswered is svcCluster.waitAnswered on this sandbox.
func (k *kubeProxyFixture) waitAnswered(t *testing.T, from framework.Client, addr netip.Addr, port, what string) responder.Result {
	t.Helper()
	return (&svcCluster{s: k.s}).waitAnswered(t, from, addr, port, what)
}

// probeAtOnce makes n new connections at the same time (so n probes that get no answer
// cost one timeout, not n) and counts who answered.
func (k *kubeProxyFixture) probeAtOnce(from framework.Client, addr netip.Addr, port string, n int, timeout time.Duration) framework.Answers {
	results := make([]responder.Result, n)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i] = k.s.ProbeFrom(from, addr, port, timeout) })
	}
	wg.Wait()
	return framework.CountAnswers(results)
}

// kovsServiceState lists what kovs would have programmed for Services on node, had it
// been left to: flows with a Service cookie, flows other than a miss flow (priority 0) in
// a Service table, and groups (only Services use them). It names the first few.
func (k *kubeProxyFixture) kovsServiceState(t *testing.T, node string) []error {
	t.Helper()
	var errs []error
	for _, f := range k.s.DumpFlows(t, node) {
		if pipeline.Cookie(f.Cookie).Category() == pipeline.CategoryService {
			errs = append(errs, fmt.Errorf("br-int has a Service flow (cookie %#x): %s", f.Cookie, f.Text))
			continue
		}
		if table, ok := pipeline.TableByID(uint8(f.Table)); f.Table >= 0 && ok && table.Phase == pipeline.PhaseServiceLB && f.Priority != 0 {
			errs = append(errs, fmt.Errorf("br-int table %s has more than its miss flow: %s", table.Name, f.Text))
		}
	}
	groups := k.s.DumpGroups(t, node)
	for _, id := range slices.Sorted(maps.Keys(groups)) {
		errs = append(errs, fmt.Errorf("br-int has group %d: %s", id, groups[id]))
	}
	if len(errs) > maxListed {
		errs = append(errs[:maxListed], fmt.Errorf("and %d more Service flows or groups", len(errs)-maxListed))
	}
	return errs
}

// maxListed bounds how many unexpected flows or groups a failure names.
const maxListed = 4

// kubeProxyHostState checks the host side of node: kube-proxy's nftables table exists and
// maps the Service's ClusterIP, and kovs put neither its kovs-services table nor a route
// for the ClusterIP there.
func (k *kubeProxyFixture) kubeProxyHostState(t *testing.T, node string) []error {
	t.Helper()
	netns := k.s.Layout.NodeNetNS(node)
	var errs []error
	family := "ip"
	if k.vip.Is6() {
		family = "ip6"
	}
	tables := inNode(t, netns, "nft", "list", "tables")
	if !strings.Contains(tables, "table "+family+" "+sandbox.KubeProxyNFTable+"\n") {
		errs = append(errs, fmt.Errorf("no nftables table %s %s (kube-proxy's); tables:\n%s", family, sandbox.KubeProxyNFTable, tables))
	} else if rules := inNode(t, netns, "nft", "list", "table", family, sandbox.KubeProxyNFTable); !strings.Contains(rules, k.vip.String()+" . tcp . 80 :") {
		errs = append(errs, fmt.Errorf("kube-proxy's table does not map ClusterIP %s port 80/tcp:\n%s", k.vip, rules))
	}
	if strings.Contains(tables, "kovs-services") {
		errs = append(errs, fmt.Errorf("the node has kovs's kovs-services nftables table with --service-proxy=none:\n%s", tables))
	}
	if routes := strings.TrimSpace(inNode(t, netns, "ip", "route", "show", "table", "all", k.vip.String())); routes != "" {
		errs = append(errs, fmt.Errorf("the node has a route for ClusterIP %s: %s", k.vip, routes))
	}
	return errs
}

// inNode runs a command in a node's network namespace and returns its output.
func inNode(t *testing.T, netns string, cmd ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", netns}, cmd...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s in %s: %v: %s", strings.Join(cmd, " "), netns, err, out)
	}
	return string(out)
}
