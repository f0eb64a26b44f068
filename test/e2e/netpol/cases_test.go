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
	// Family is ipv4 (default), ipv6 or dual: the sandbox the case runs in.
	Family string `json:"family,omitempty"`
	// DualStack runs the case in the dual-stack sandbox too, where every cell is probed
	// over IPv4 and over IPv6 (a Cell's Family limits it to one of them).
	DualStack bool `json:"dualStack,omitempty"`
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
// address). Ports limits it to some probed ports (all when empty), Family (ipv4 or ipv6)
// to the probes of one address family.
type Cell struct {
	From   string   `json:"from"`
	To     string   `json:"to"`
	Ports  []string `json:"ports,omitempty"`
	Family string   `json:"family,omitempty"`
	Allow  bool     `json:"allow"`
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
		if c.Family != "" && c.Family != "ipv4" && c.Family != "ipv6" && c.Family != "dual" {
			return nil, fmt.Errorf("%s: family %q: use ipv4, ipv6 or dual (dualStack: true runs it dual-stack too)", f, c.Family)
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

// expected is the expected value of every cell of the matrix over these families.
func (e Expect) expected(cells []cellKey) map[cellKey]bool {
	out := make(map[cellKey]bool, len(cells))
	for _, c := range cells {
		allowed := e.Default != "deny"
		for _, r := range e.Rules {
			if matches(r.From, c.From) && matchesTo(r.To, c.From, c.To) && (len(r.Ports) == 0 || contains(r.Ports, c.Port)) &&
				(r.Family == "" || r.Family == familyName(c.IPv6)) {
				allowed = r.Allow
			}
		}
		out[c] = allowed
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
// pods run: {{ip "ns/pod"}} is the pod's first address and {{cidr "ns/pod" BITS}} the
// prefix of BITS bits around it, masked ({{cidr "y/b" 32}} is y/b alone, {{cidr "y/b" 24}}
// the /24 it was allocated from); {{ip6 ...}} and {{cidr6 ...}} take the pod's IPv6
// address (in a dual-stack sandbox the first address is the IPv4 one). addrOf resolves a
// pod key to its addresses.
func expandAddresses(doc string, addrOf func(key string) ([]netip.Addr, error)) (string, error) {
	if !strings.Contains(doc, "{{") {
		return doc, nil
	}
	pick := func(key string, v6only bool) (netip.Addr, error) {
		addrs, err := addrOf(key)
		if err != nil {
			return netip.Addr{}, err
		}
		for _, a := range addrs {
			if !v6only || a.Is6() {
				return a, nil
			}
		}
		return netip.Addr{}, fmt.Errorf("pod %s has no address of that family", key)
	}
	prefix := func(v6only bool) func(string, int) (string, error) {
		return func(key string, bits int) (string, error) {
			a, err := pick(key, v6only)
			if err != nil {
				return "", err
			}
			p, err := a.Prefix(bits)
			if err != nil {
				return "", fmt.Errorf("cidr %q %d: %w", key, bits, err)
			}
			return p.String(), nil
		}
	}
	addr := func(v6only bool) func(string) (string, error) {
		return func(key string) (string, error) {
			a, err := pick(key, v6only)
			return a.String(), err
		}
	}
	tmpl, err := template.New("policy").Option("missingkey=error").Funcs(template.FuncMap{
		"ip": addr(false), "ip6": addr(true), "cidr": prefix(false), "cidr6": prefix(true),
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
