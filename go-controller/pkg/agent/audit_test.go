package agent

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/audit"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// TestAuditRecordNamesTheDecidingRule: a packet-in's cookie names the rule that decided,
// as the share and the node's pods say, and its userdata the verdict.
func TestAuditRecordNamesTheDecidingRule(t *testing.T) {
	state := NewNodeState(1, nil)
	web, client := auditPod("web", 3, 10), auditPod("client", 4, 11)
	state.SetPod("p3", web)
	state.SetPod("p4", client)
	share := policy.NewNodeShare("node1")
	share.Rules["x/web-80/ingress/0"] = policy.Rule{ID: "x/web-80/ingress/0", Policy: policy.PolicyRef{Namespace: "x", Name: "web-80"},
		Direction: policy.Ingress, Action: policy.ActionAllow}
	share.ClusterRules = []policy.ClusterRule{{ID: "tenants/Ingress/1", Policy: "tenants", Name: "no-b", Tier: policy.TierAdmin,
		Direction: policy.Ingress, Action: policy.ClusterDeny}}
	state.SetPolicy(share)
	l := &auditLog{a: &Agent{cfg: Config{NodeName: "node1"}, state: state}}
	packet := func(cookie pipeline.Cookie, verdict audit.Verdict) audit.PacketIn {
		return audit.PacketIn{Table: 70, Cookie: uint64(cookie), UserData: []byte{verdict.Code()}, Proto: "tcp",
			Fields: map[string]string{"nw_src": "10.244.1.11", "nw_dst": "10.244.1.10", "tp_src": "40000", "tp_dst": "80"}}
	}
	at := time.Now()
	for _, tc := range []struct {
		name string
		pkt  audit.PacketIn
		want string // kind/namespace/name/rule/tier/direction/verdict; "" for no record
	}{
		{"a NetworkPolicy rule's allow", packet(pipeline.NewPolicyCookie(1, pipeline.PolicyKindRule, pipeline.PolicyRuleObjectID("x/web-80/ingress/0")), audit.Allow),
			"NetworkPolicy/x/web-80/x/web-80/ingress/0//Ingress/allow"},
		{"web's ingress default deny", packet(pipeline.NewPolicyCookie(1, pipeline.PolicyKindIngressDeny, 3), audit.Deny),
			"NetworkPolicy/x//default-deny//Ingress/deny"},
		{"client's egress default deny", packet(pipeline.NewPolicyCookie(1, pipeline.PolicyKindEgressDeny, 4), audit.Deny),
			"NetworkPolicy/x//default-deny//Egress/deny"},
		{"a ClusterNetworkPolicy rule, by its name", packet(pipeline.NewClusterPolicyCookie(1, pipeline.ClusterKindRule, pipeline.PolicyRuleObjectID("tenants/Ingress/1")), audit.Deny),
			"ClusterNetworkPolicy//tenants/no-b/Admin/Ingress/deny"},
		{"a rule the share no longer has", packet(pipeline.NewPolicyCookie(1, pipeline.PolicyKindRule, 12345), audit.Allow), ""},
		{"a deny of a port without a pod", packet(pipeline.NewPolicyCookie(1, pipeline.PolicyKindIngressDeny, 9), audit.Deny), ""},
		{"another category", packet(pipeline.NewCookie(1, pipeline.CategoryPod, 3), audit.Allow), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := l.record(tc.pkt, at)
			if tc.want == "" {
				if ok {
					t.Fatalf("recorded %+v, want nothing", r)
				}
				return
			}
			if !ok {
				t.Fatal("not recorded")
			}
			got := fmt.Sprintf("%s/%s/%s/%s/%s/%s/%s", r.Kind, r.Namespace, r.Name, r.Rule, r.Tier, r.Direction, r.Verdict)
			if got != tc.want || r.SrcIP != "10.244.1.11" || r.DstPort != 80 || r.Protocol != "TCP" || r.Node != "node1" {
				t.Errorf("record %+v (%s), want %s", r, got, tc.want)
			}
		})
	}
	names := newPodNames(l.a)
	if got := names.of(context.Background(), web.IPs[0]); got != "x/web" {
		t.Errorf("a local pod's address names %q, want x/web", got)
	}
}

func auditPod(name string, ofport uint32, host byte) pipeline.PodPort {
	return pipeline.PodPort{Namespace: "x", Name: name, UID: "uid-" + name, OFPort: ofport,
		IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 244, 1, host})}}
}
