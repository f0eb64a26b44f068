package pipeline

import (
	"fmt"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/audit"
)

// auditScenario is the ClusterNetworkPolicy scenario (flows_cluster_test.go) with the
// audit log on: namespace x logs its NetworkPolicies' allows and denies, deny-clients its
// denies, pass-node-2 its passes; y and the other cluster policies log nothing.
func auditScenario() scenario {
	sc := clusterScenario()
	sc.name = "three-nodes-dual-stack-node-1-audit"
	sc.title = "the ClusterNetworkPolicy scenario with the audit log on for namespace x, deny-clients and pass-node-2 (see audit_test.go)"
	sc.audit = &Audit{Meter: AuditMeterID,
		Namespaces:      map[string]audit.Verdicts{"x": audit.Verdicts(0).With(audit.Allow).With(audit.Deny)},
		ClusterPolicies: map[string]audit.Verdicts{"deny-clients": audit.Verdicts(0).With(audit.Deny), "pass-node-2": audit.Verdicts(0).With(audit.Pass)},
	}
	return sc
}

// TestAuditLogsWithoutChangingVerdicts traces the cluster scenario's connections with and
// without the audit log: every packet ends the same way (same outputs, same end), and the
// logged flows, only those, send a copy through the audit meter with the verdict of the
// flow that decided.
func TestAuditLogsWithoutChangingVerdicts(t *testing.T) {
	plain, logged := clusterScenario().tracer(t), auditScenario().tracer(t)
	pods := policyPods()
	a, b, c := pods[0], pods[1], pods[2]
	for _, tc := range []struct {
		name string
		pkt  Packet
		ct   CTFlags
		want []audit.Verdict // the copies sent, in order
	}{
		{"deny-clients denies x/b to x/a TCP 80: logged deny", fromLocal(t, b, podIP(t, a, false), IPProtoTCP, 80), CTNew, []audit.Verdict{audit.Deny}},
		{"pass-node-2 passes, then x's NetworkPolicy allows: both logged", arriving(remoteR4, a, podIP(t, a, false), IPProtoTCP, 8080), CTNew,
			[]audit.Verdict{audit.Pass, audit.Allow}},
		{"deny-range denies node-3's TCP 8080: not logged", arriving(remoteS4, a, podIP(t, a, false), IPProtoTCP, 8080), CTNew, nil},
		{"x/a's default deny: logged deny", arriving(remoteS4, a, podIP(t, a, false), IPProtoTCP, 9999), CTNew, []audit.Verdict{audit.Deny}},
		{"x/a's NetworkPolicy allows egress: logged allow", fromLocal(t, a, ip("1.1.1.1"), IPProtoTCP, 443), CTNew, []audit.Verdict{audit.Allow}},
		{"an established connection is never logged", arriving(remoteR4, a, podIP(t, a, false), IPProtoTCP, 8080), CTEstablished, nil},
		{"y/c's Baseline deny (tenants): not logged", arriving(remoteS4, c, podIP(t, c, false), IPProtoTCP, 443), CTNew, nil},
		{"y/c open: not logged", arriving(ip("192.168.1.5"), c, podIP(t, c, false), IPProtoTCP, 443), CTNew, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, got := trace(t, plain, tc.pkt, tc.ct), trace(t, logged, tc.pkt, tc.ct)
			if fmt.Sprint(want.Outputs) != fmt.Sprint(got.Outputs) || want.End != got.End || fmt.Sprint(want.Commits) != fmt.Sprint(got.Commits) ||
				fmt.Sprint(visited(want)) != fmt.Sprint(visited(got)) {
				t.Fatalf("logging changed the verdict:\nwithout:\n%s\nwith:\n%s", want, got)
			}
			if len(want.Audited) != 0 {
				t.Fatalf("copies sent without the audit log: %v", want.Audited)
			}
			var verdicts []audit.Verdict
			for _, c := range got.Audited {
				if c.Meter != AuditMeterID {
					t.Errorf("copy %s is not metered by the audit meter %d", c, AuditMeterID)
				}
				verdicts = append(verdicts, audit.VerdictOfCode(c.UserData))
			}
			if fmt.Sprint(verdicts) != fmt.Sprint(tc.want) {
				t.Errorf("logged %v, want %v:\n%s", verdicts, tc.want, got)
			}
		})
	}
}

// visited are the tables a trace looked up, in order.
func visited(r Result) []string {
	out := make([]string, len(r.Steps))
	for i, s := range r.Steps {
		out[i] = s.Table.Name
	}
	return out
}
