package netpol_test

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"

	"github.com/kovs-net/kovs/test/e2e/netpol/policymodel"
)

// write is one API change a step makes, in the order the runner makes them: the
// policies of Apply (created or updated), then Delete, then PodLabels, then
// NamespaceLabels (each map in key order). Each is one object written once, so the model
// can follow the cluster through every state a step passes.
type write struct {
	policy       *networkingv1.NetworkPolicy // create or update
	deletePolicy string                      // namespace/name
	podLabels    string                      // namespace/name whose labels become labels
	nsLabels     string                      // namespace whose labels become labels
	labels       map[string]string
}

func (w write) String() string {
	switch {
	case w.policy != nil:
		return "apply policy " + w.policy.Namespace + "/" + w.policy.Name
	case w.deletePolicy != "":
		return "delete policy " + w.deletePolicy
	case w.podLabels != "":
		return fmt.Sprintf("label pod %s %v", w.podLabels, w.labels)
	}
	return fmt.Sprintf("label namespace %s %v", w.nsLabels, w.labels)
}

// stepWrites turns a step into its writes; addrOf resolves the pod addresses the policies
// name ({{ip ...}}, {{cidr ...}}).
func stepWrites(step Step, addrOf func(string) ([]netip.Addr, error)) ([]write, error) {
	var out []write
	for _, doc := range splitYAML(step.Apply) {
		doc, err := expandAddresses(doc, addrOf)
		if err != nil {
			return nil, fmt.Errorf("policy YAML: %w\n%s", err, doc)
		}
		var np networkingv1.NetworkPolicy
		if err := yaml.UnmarshalStrict([]byte(doc), &np); err != nil {
			return nil, fmt.Errorf("policy YAML: %w\n%s", err, doc)
		}
		if np.Namespace == "" || np.Name == "" {
			return nil, fmt.Errorf("policy without a namespace or name:\n%s", doc)
		}
		out = append(out, write{policy: &np})
	}
	for _, key := range step.Delete {
		if !strings.Contains(key, "/") {
			return nil, fmt.Errorf("delete %q: want namespace/name", key)
		}
		out = append(out, write{deletePolicy: key})
	}
	for _, key := range sortedKeysOf(step.PodLabels) {
		out = append(out, write{podLabels: key, labels: step.PodLabels[key]})
	}
	for _, ns := range sortedKeysOf(step.NamespaceLabels) {
		out = append(out, write{nsLabels: ns, labels: step.NamespaceLabels[ns]})
	}
	return out, nil
}

// applyTo makes the write in the model's cluster.
func (w write) applyTo(c *policymodel.Cluster) error {
	switch {
	case w.policy != nil:
		for i := range c.Policies {
			if c.Policies[i].Namespace == w.policy.Namespace && c.Policies[i].Name == w.policy.Name {
				c.Policies[i] = *w.policy
				return nil
			}
		}
		c.Policies = append(c.Policies, *w.policy)
	case w.deletePolicy != "":
		for i := range c.Policies {
			if c.Policies[i].Namespace+"/"+c.Policies[i].Name == w.deletePolicy {
				c.Policies = append(c.Policies[:i], c.Policies[i+1:]...)
				return nil
			}
		}
		return fmt.Errorf("delete %s: no such policy", w.deletePolicy)
	case w.podLabels != "":
		for i := range c.Pods {
			if c.Pods[i].Namespace+"/"+c.Pods[i].Name == w.podLabels {
				c.Pods[i].Labels = copyLabels(w.labels)
				return nil
			}
		}
		return fmt.Errorf("label pod %s: no such pod", w.podLabels)
	default:
		for i := range c.Namespaces {
			if c.Namespaces[i].Name == w.nsLabels {
				c.Namespaces[i].Labels = copyLabels(w.labels)
				return nil
			}
		}
		return fmt.Errorf("label namespace %s: no such namespace", w.nsLabels)
	}
	return nil
}

// modelVerdicts asks the model about every cell.
func modelVerdicts(c *policymodel.Cluster, cells []cellKey) (map[cellKey]bool, error) {
	out := make(map[cellKey]bool, len(cells))
	for _, cell := range cells {
		p, err := parseProbePort(cell.Port)
		if err != nil {
			return nil, err
		}
		ok, err := c.Allowed(policymodel.Connection{From: cell.From, To: cell.To, Protocol: p.protocol, Port: p.number, IPv6: cell.IPv6})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cell, err)
		}
		out[cell] = ok
	}
	return out, nil
}

func copyLabels(in map[string]string) map[string]string {
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

func sortedKeysOf[V any](m map[string]V) []string {
	keys := mapKeys(m)
	sort.Strings(keys)
	return keys
}
