package controller

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/kovs-net/kovs/go-controller/pkg/audit"
)

// TestAuditAnnotationWarnings: a malformed kovs.io/audit-log value gets one Warning Event
// naming the value and the accepted verdicts; a well-formed one, or the same malformed
// value seen again, none; a new malformed value a new one.
func TestAuditAnnotationWarnings(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	ns := &auditAnnotationWarnings{recorder: rec, accepted: audit.NamespaceVerdicts, warned: map[string]string{}}
	cnp := &auditAnnotationWarnings{recorder: rec, accepted: audit.ClusterPolicyVerdicts, warned: map[string]string{}}
	namespace := func(value string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Annotations: map[string]string{audit.Annotation: value}}}
	}
	policy := &v1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "tenants", Annotations: map[string]string{audit.Annotation: "deny,drop"}}}
	ns.check(namespace("allow,deny"))
	ns.check(namespace("pass"))
	ns.check(namespace("pass"))
	ns.check(namespace("verbose"))
	ns.check(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plain"}})
	cnp.check(policy)
	close(rec.Events)
	var events []string
	for e := range rec.Events {
		events = append(events, e)
	}
	want := []string{
		`Warning InvalidAuditAnnotation kovs.io/audit-log="pass": "pass" is not a verdict; give a comma-separated list of allow, deny`,
		`Warning InvalidAuditAnnotation kovs.io/audit-log="verbose": "verbose" is not a verdict; give a comma-separated list of allow, deny`,
		`Warning InvalidAuditAnnotation kovs.io/audit-log="deny,drop": "drop" is not a verdict; give a comma-separated list of allow, deny, pass`,
	}
	if len(events) != len(want) {
		t.Fatalf("events %q, want %d", events, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(events[i], w) || !strings.Contains(events[i], "nothing is logged for it until it is corrected") {
			t.Errorf("event %d = %q, want %q...", i, events[i], w)
		}
	}
}
