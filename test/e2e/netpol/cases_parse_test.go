package netpol_test

import (
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// TestCasesParse checks every case file without a cluster: it parses strictly, every
// policy it applies is a valid NetworkPolicy with a namespace, and its expectations name
// ports and pods that exist.
func TestCasesParse(t *testing.T) {
	cases, err := loadCases("cases")
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatal("no cases")
	}
	for _, c := range cases {
		keys := sortedKeys(casePods(c))
		namespaces := append(append([]string{}, modelNamespaces...), mapKeys(c.ExtraNamespaces)...)
		for i, step := range c.Steps {
			for key := range step.PodLabels {
				if !contains(keys, key) {
					t.Errorf("%s step %d: podLabels for unknown pod %q", c.Name, i+1, key)
				}
			}
			for ns := range step.NamespaceLabels {
				if !contains(namespaces, ns) {
					t.Errorf("%s step %d: namespaceLabels for unknown namespace %q (quote y)", c.Name, i+1, ns)
				}
			}
			for _, doc := range splitYAML(step.Apply) {
				doc, err := expandAddresses(doc, offlineAddrOf(offlineCluster(c, sandboxFamilies(c)[len(sandboxFamilies(c))-1])))
				if err != nil {
					t.Errorf("%s step %d: %v", c.Name, i+1, err)
					continue
				}
				var np networkingv1.NetworkPolicy
				if err := yaml.UnmarshalStrict([]byte(doc), &np); err != nil {
					t.Errorf("%s step %d: %v", c.Name, i+1, err)
				} else if np.Namespace == "" || np.Name == "" {
					t.Errorf("%s step %d: policy without namespace or name", c.Name, i+1)
				} else if !contains(namespaces, np.Namespace) {
					t.Errorf("%s step %d: policy %s in unknown namespace %q (YAML 1.1 reads an unquoted y as true: quote it)",
						c.Name, i+1, np.Name, np.Namespace)
				} else if v := booleanSelectorValue(np); v != "" {
					t.Errorf("%s step %d: policy %s/%s selects on %s (an unquoted y, n, yes, no, on or off is a YAML 1.1 boolean: quote it)",
						c.Name, i+1, np.Namespace, np.Name, v)
				}
			}
			for _, r := range step.Expect.Rules {
				if !matchesAny(r.From, keys) || (r.To != "self" && !matchesAny(r.To, keys)) {
					t.Errorf("%s step %d: rule %+v matches no pod", c.Name, i+1, r)
				}
				if r.Family != "" && r.Family != "ipv4" && r.Family != "ipv6" {
					t.Errorf("%s step %d: rule %+v: family %q: use ipv4 or ipv6", c.Name, i+1, r, r.Family)
				}
				for _, p := range r.Ports {
					if !contains(step.Expect.ports(), p) {
						t.Errorf("%s step %d: rule port %s is not probed", c.Name, i+1, p)
					}
				}
			}
		}
	}
}

// booleanSelectorValue returns the first "key=true/false" a policy's selectors hold: the
// trace of an unquoted YAML 1.1 boolean (ns: y), since no case labels anything true/false.
func booleanSelectorValue(np networkingv1.NetworkPolicy) string {
	sels := []*metav1.LabelSelector{&np.Spec.PodSelector}
	peers := func(ps []networkingv1.NetworkPolicyPeer) {
		for _, p := range ps {
			sels = append(sels, p.PodSelector, p.NamespaceSelector)
		}
	}
	for _, r := range np.Spec.Ingress {
		peers(r.From)
	}
	for _, r := range np.Spec.Egress {
		peers(r.To)
	}
	for _, s := range sels {
		if s == nil {
			continue
		}
		for k, v := range s.MatchLabels {
			if v == "true" || v == "false" {
				return k + "=" + v
			}
		}
		for _, e := range s.MatchExpressions {
			for _, v := range e.Values {
				if v == "true" || v == "false" {
					return e.Key + " " + string(e.Operator) + " " + v
				}
			}
		}
	}
	return ""
}

func matchesAny(sel string, keys []string) bool {
	for _, k := range keys {
		if matches(sel, k) {
			return true
		}
	}
	return false
}
