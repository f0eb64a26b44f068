package netpol_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"text/template"

	"sigs.k8s.io/yaml"
)

// Case is one truth-table case: steps applied in order, each followed by the reachability
// it must produce. Case files live in cases/*.yaml.
type Case struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Family is ipv4 (default) or ipv6: the sandbox the case runs in.
	Family string `json:"family,omitempty"`
	// ExtraPods are added to the standard model (x, y, z x a, b, c).
	ExtraPods []ModelPod `json:"extraPods,omitempty"`
	// ExtraNamespaces are created with their labels.
	ExtraNamespaces map[string]map[string]string `json:"extraNamespaces,omitempty"`
	Steps           []Step                       `json:"steps"`
}

// Step changes the cluster, then checks reachability.
type Step struct {
	// Apply is Kubernetes YAML (NetworkPolicies), created or updated.
	Apply string `json:"apply,omitempty"`
	// Delete names NetworkPolicies to delete, as namespace/name.
	Delete []string `json:"delete,omitempty"`
	// PodLabels and NamespaceLabels replace the labels of pods ("ns/name") and namespaces.
	PodLabels       map[string]map[string]string `json:"podLabels,omitempty"`
	NamespaceLabels map[string]map[string]string `json:"namespaceLabels,omitempty"`
	Expect          Expect                       `json:"expect"`
}

// Expect is the expected reachability on the probed ports: every ordered pair starts as
// Default and the rules, in order, set the cells they match.
type Expect struct {
	// Probe lists the ports to probe ("80/tcp"); default 80/tcp.
	Probe []string `json:"probe,omitempty"`
	// Default is the starting value of every cell: "allow" (the default) or "deny".
	Default string `json:"default,omitempty"`
	Rules   []Cell `json:"rules,omitempty"`
}

// Cell sets the expectation of the pairs it matches. From and To are "*", "ns/*" or
// "ns/pod"; To may also be "self": the pair of a pod with itself (a pod probing its own
// address). Ports limits it to some probed ports (all when empty).
type Cell struct {
	From  string   `json:"from"`
	To    string   `json:"to"`
	Ports []string `json:"ports,omitempty"`
	Allow bool     `json:"allow"`
}

func loadCases(dir string) ([]Case, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var cases []Case
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var c Case
		if err := yaml.UnmarshalStrict(b, &c); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if c.Name == "" {
			c.Name = strings.TrimSuffix(filepath.Base(f), ".yaml")
		}
		if len(c.Steps) == 0 {
			return nil, fmt.Errorf("%s: no steps", f)
		}
		cases = append(cases, c)
	}
	return cases, nil
}

// matches reports whether a pod key matches a selector "*", "ns/*" or "ns/pod".
func matches(sel, key string) bool {
	if sel == "*" {
		return true
	}
	ns, name, _ := strings.Cut(sel, "/")
	kns, kname, _ := strings.Cut(key, "/")
	return ns == kns && (name == "*" || name == kname)
}

// matchesTo is matches for a Cell's To, which may be "self".
func matchesTo(sel, from, to string) bool {
	if sel == "self" {
		return from == to
	}
	return matches(sel, to)
}

// expected computes the expected matrix: port -> from -> to -> allowed.
func (e Expect) expected(keys []string) map[string]map[string]map[string]bool {
	out := map[string]map[string]map[string]bool{}
	for _, port := range e.ports() {
		out[port] = map[string]map[string]bool{}
		for _, from := range keys {
			out[port][from] = map[string]bool{}
			for _, to := range keys {
				allowed := e.Default != "deny"
				for _, r := range e.Rules {
					if matches(r.From, from) && matchesTo(r.To, from, to) && (len(r.Ports) == 0 || contains(r.Ports, port)) {
						allowed = r.Allow
					}
				}
				out[port][from][to] = allowed
			}
		}
	}
	return out
}

func (e Expect) ports() []string {
	if len(e.Probe) == 0 {
		return []string{"80/tcp"}
	}
	return e.Probe
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// expandAddresses fills in the pod addresses a policy names, which are known only once the
// pods run: {{ip "ns/pod"}} is the pod's (first) address and {{cidr "ns/pod" BITS}} the
// prefix of BITS bits around it, masked ({{cidr "y/b" 32}} is y/b alone, {{cidr "y/b" 24}}
// the /24 it was allocated from). addrOf resolves a pod key to its address.
func expandAddresses(doc string, addrOf func(key string) (netip.Addr, error)) (string, error) {
	if !strings.Contains(doc, "{{") {
		return doc, nil
	}
	tmpl, err := template.New("policy").Option("missingkey=error").Funcs(template.FuncMap{
		"ip": func(key string) (string, error) {
			a, err := addrOf(key)
			if err != nil {
				return "", err
			}
			return a.String(), nil
		},
		"cidr": func(key string, bits int) (string, error) {
			a, err := addrOf(key)
			if err != nil {
				return "", err
			}
			p, err := a.Prefix(bits)
			if err != nil {
				return "", fmt.Errorf("cidr %q %d: %w", key, bits, err)
			}
			return p.String(), nil
		},
	}).Parse(doc)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, nil); err != nil {
		return "", err
	}
	return b.String(), nil
}
