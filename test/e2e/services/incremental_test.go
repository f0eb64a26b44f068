package services_test

import (
	"fmt"
	"net/netip"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// quietFor is how long no kovs flow may have been installed on the node before the
// change, so that what the change installs can be told apart by its age.
const quietFor = 3 * time.Second

var groupAction = regexp.MustCompile(`group:(\d+)`)

// testEndpointChangeIsIncremental: adding an endpoint to one Service rewrites that
// Service's group and installs only Service flows of that Service; another Service's
// flows and groups, and every other kovs flow, are left alone (issue 6: "one Service's
// group is rewritten atomically, nothing else is touched"). Read on node1 with ovs-ofctl:
// a flow the change installed is younger than the change.
func (c *svcCluster) testEndpointChangeIsIncremental(t *testing.T) {
	ns := c.namespace(t, "incremental")
	svcA, writeA := c.handSlicedServiceIn(t, ns, "inc-a")
	svcB, writeB := c.handSlicedServiceIn(t, ns, "inc-b")
	ipA, ipB := framework.ClusterIPs(svcA)[0], framework.ClusterIPs(svcB)[0]
	web1, web2, web3 := framework.ReadyEndpoint(c.web[0], ipA), framework.ReadyEndpoint(c.web[1], ipA), framework.ReadyEndpoint(c.web[2], ipA)
	writeA(web1)
	writeB(web2)
	from := c.client("node3")
	c.waitAnswered(t, from, ipA, "80/tcp", "Service inc-a")
	c.waitAnswered(t, from, ipB, "80/tcp", "Service inc-b")
	framework.Eventually(t, programTimeout, fmt.Sprintf("no kovs flow installed on node1 for %s", quietFor), func() error {
		if young := ownedYoungerThan(c.s.DumpFlows(t, "node1"), quietFor); len(young) > 0 {
			return fmt.Errorf("%d flows younger than %s, e.g. %s", len(young), quietFor, young[0].Text)
		}
		return nil
	})
	groupsBefore := c.s.DumpGroups(t, "node1")
	start := time.Now()
	writeA(web1, web3)
	framework.Eventually(t, programTimeout, "the added endpoint to receive connections through inc-a", func() error {
		return allOf(c.s.Spread(from, ipA, "80/tcp", 20, probeTimeout), key(c.web[0]), key(c.web[2]))
	})
	flows := c.s.DumpFlows(t, "node1")
	elapsed := time.Since(start)
	groupsAfter := c.s.DumpGroups(t, "node1")

	for _, f := range ownedYoungerThan(flows, elapsed) {
		if cat := pipeline.Cookie(f.Cookie).Category(); cat != pipeline.CategoryService {
			t.Errorf("an endpoint change of one Service reinstalled a flow of cookie category %d (cookie %#x): %s", cat, f.Cookie, f.Text)
		}
		if mentions(f.Text, ipB) {
			t.Errorf("an endpoint change of inc-a reinstalled a flow of inc-b: %s", f.Text)
		}
	}
	groupsA := groupsOf(flows, ipA)
	if len(groupsA) == 0 {
		t.Fatalf("no flow of node1 sends %s to a group", ipA)
	}
	changed := changedGroups(groupsBefore, groupsAfter)
	if len(changed) == 0 {
		t.Errorf("adding an endpoint to inc-a changed no group on node1 (groups of inc-a: %v)", groupsA)
	}
	for _, id := range changed {
		if !groupsA[id] {
			t.Errorf("adding an endpoint to inc-a changed group %d, which is not inc-a's (%v): before %q, after %q",
				id, groupsA, groupsBefore[id], groupsAfter[id])
		}
	}
	t.Logf("one endpoint added to inc-a: groups changed %v, flows installed %d (in %s)", changed, len(ownedYoungerThan(flows, elapsed)), elapsed.Round(time.Millisecond))
}

// handSlicedServiceIn is handSlicedService in a given namespace.
func (c *svcCluster) handSlicedServiceIn(t *testing.T, ns, name string) (*corev1.Service, func(...framework.SliceEndpoint)) {
	svc := c.service(t, ns, name, nil, []corev1.ServicePort{svcPort("http", 80, intstr.FromInt32(8080), corev1.ProtocolTCP)}, nil)
	ports := []discoveryv1.EndpointPort{framework.EndpointPort("http", 8080, corev1.ProtocolTCP)}
	return svc, func(eps ...framework.SliceEndpoint) {
		c.s.ApplyEndpointSlice(t, framework.EndpointSliceFor(svc, name+"-1", ports, eps))
	}
}

// ownedYoungerThan are the kovs-owned flows installed less than age ago.
func ownedYoungerThan(flows []framework.Flow, age time.Duration) []framework.Flow {
	var out []framework.Flow
	for _, f := range flows {
		if pipeline.Cookie(f.Cookie).Owned() && f.Age < age {
			out = append(out, f)
		}
	}
	return out
}

// mentions reports whether a flow matches on addr as a destination.
func mentions(text string, addr netip.Addr) bool {
	for _, field := range []string{"nw_dst=", "ipv6_dst="} {
		if strings.Contains(text, field+addr.String()+",") || strings.Contains(text, field+addr.String()+" ") {
			return true
		}
	}
	return false
}

// groupsOf are the groups the flows matching destination addr send to.
func groupsOf(flows []framework.Flow, addr netip.Addr) map[uint32]bool {
	out := map[uint32]bool{}
	for _, f := range flows {
		if !mentions(f.Text, addr) {
			continue
		}
		for _, m := range groupAction.FindAllStringSubmatch(f.Text, -1) {
			var id uint32
			fmt.Sscan(m[1], &id)
			out[id] = true
		}
	}
	return out
}

// changedGroups are the group IDs added, removed or rewritten, sorted.
func changedGroups(before, after map[uint32]string) []uint32 {
	var out []uint32
	for id, g := range before {
		if after[id] != g {
			out = append(out, id)
		}
	}
	for id := range after {
		if _, ok := before[id]; !ok {
			out = append(out, id)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
