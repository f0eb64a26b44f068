package networkpolicy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// groupSpec defines a group by selectors. A namespace-scoped group has a scope (its
// namespace) and no nsSelector; a group with an nsSelector spans the namespaces it
// selects. The keys are the canonical forms of the selectors.
type groupSpec struct {
	scope      string
	nsSelector labels.Selector
	nsKey      string
	selector   labels.Selector
	podKey     string
	// ports, when set, restricts the group to pods that resolve a named port to a number.
	ports *portFilter
	// within, when set, restricts the group to the addresses in these prefixes (the
	// ipBlock peers of an egress rule with named ports): a member has at least one, and
	// only those are the group's addresses. withinKey is their ipBlockKey.
	within    []netip.Prefix
	withinKey string
}

// groupKey is the canonical form of a spec: equal keys select the same pods. It is a
// struct of the selectors' canonical strings, so that looking a group up builds nothing.
type groupKey struct {
	cluster bool   // scope is a namespaceSelector key, not a namespace
	scope   string // the namespace, or the namespaceSelector's key
	pods    string // the podSelector's key
	ports   string // the port filter's key, if any
	within  string // the address filter's key, if any
}

func (s groupSpec) key() groupKey {
	k := groupKey{scope: s.scope, pods: s.podKey}
	if s.nsSelector != nil {
		k.cluster, k.scope = true, s.nsKey
	}
	if s.ports != nil {
		k.ports = s.ports.baseKey() + "=" + strconv.Itoa(int(s.ports.number))
	}
	k.within = s.withinKey
	return k
}

// String is the key's text, from which the group's ID derives.
func (k groupKey) String() string {
	var b strings.Builder
	if k.cluster {
		b.WriteString("s:")
	} else {
		b.WriteString("n:")
	}
	b.WriteString(k.scope)
	b.WriteString("|p:")
	b.WriteString(k.pods)
	if k.ports != "" {
		b.WriteString("|port:")
		b.WriteString(k.ports)
	}
	if k.within != "" {
		b.WriteString("|in:")
		b.WriteString(k.within)
	}
	return b.String()
}

// withPorts returns the spec restricted to pods resolving names to number.
func (s groupSpec) withPorts(protocol policy.Protocol, names []string, number int32) groupSpec {
	s.ports = &portFilter{protocol: protocol, names: names, number: number}
	return s
}

// withinPrefixes returns the spec restricted to the addresses in prefixes (not empty).
func (s groupSpec) withinPrefixes(prefixes []netip.Prefix) groupSpec {
	s.within, s.withinKey = prefixes, ipBlockKey(prefixes)
	return s
}

// inScope reports whether addr is one of the spec's addresses: any address when the spec
// has no address filter.
func (s *groupSpec) inScope(addr netip.Addr) bool {
	if s.within == nil {
		return true
	}
	return slices.ContainsFunc(s.within, func(p netip.Prefix) bool { return p.Contains(addr) })
}

// baseKey identifies the names and protocol of a filter, without its number.
func (f *portFilter) baseKey() string {
	return string(f.protocol) + ":" + strings.Join(f.names, ",")
}

// setID derives a stable, short set ID from a canonical key.
func setID(prefix, key string) string {
	sum := sha256.Sum256([]byte(key))
	return prefix + hex.EncodeToString(sum[:8])
}

// selectors interns parsed label selectors by their canonical key, so that the many
// policies that repeat a selector share one parsed form and one key string.
type selectors struct {
	byKey map[string]interned
	// single indexes the selectors of exactly one matchLabels pair, the most common
	// kind, so that looking them up allocates nothing.
	single map[[2]string]interned
}

type interned struct {
	sel labels.Selector
	key string
}

func newSelectors() selectors {
	return selectors{byKey: map[string]interned{}, single: map[[2]string]interned{}}
}

// parse returns the selector of ls (nil means everything) and its canonical key.
func (s selectors) parse(ls *metav1.LabelSelector) (labels.Selector, string, error) {
	if ls == nil {
		return labels.Everything(), "", nil
	}
	var pair [2]string
	isPair := len(ls.MatchExpressions) == 0 && len(ls.MatchLabels) == 1
	if isPair {
		for k, v := range ls.MatchLabels {
			pair = [2]string{k, v}
		}
		if in, ok := s.single[pair]; ok {
			return in.sel, in.key, nil
		}
	}
	key, fast := matchLabelsKey(ls)
	in, ok := s.byKey[key]
	if !fast || !ok {
		sel, err := metav1.LabelSelectorAsSelector(ls)
		if err != nil {
			return nil, "", fmt.Errorf("parse label selector: %w", err)
		}
		if !fast {
			key = canonicalKey(sel)
		}
		if in, ok = s.byKey[key]; !ok {
			in = interned{sel: sel, key: key}
			s.byKey[key] = in
		}
	}
	if isPair {
		s.single[pair] = in
	}
	return in.sel, in.key, nil
}

// matchLabelsKey returns the canonical key of a selector that has only matchLabels,
// without parsing it: the requirements "k=v" sorted and joined by commas.
func matchLabelsKey(ls *metav1.LabelSelector) (string, bool) {
	if len(ls.MatchExpressions) > 0 {
		return "", false
	}
	switch len(ls.MatchLabels) {
	case 0:
		return "", true
	case 1:
		for k, v := range ls.MatchLabels {
			return k + "=" + v, true
		}
	}
	reqs := make([]string, 0, len(ls.MatchLabels))
	for k, v := range ls.MatchLabels {
		reqs = append(reqs, k+"="+v)
	}
	slices.Sort(reqs)
	return strings.Join(reqs, ","), true
}

// canonicalKey is the sorted, duplicate-free list of the selector's requirements.
func canonicalKey(sel labels.Selector) string {
	reqs, _ := sel.Requirements()
	out := make([]string, 0, len(reqs))
	for i := range reqs {
		out = append(out, reqs[i].String())
	}
	slices.Sort(out)
	return strings.Join(slices.Compact(out), ",")
}

// ipBlockPrefixes returns the addresses of an ipBlock: its CIDR minus its exceptions.
func ipBlockPrefixes(b *networkingv1.IPBlock) ([]netip.Prefix, error) {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return nil, fmt.Errorf("parse ipBlock cidr %q: %w", b.CIDR, err)
	}
	except := make([]netip.Prefix, 0, len(b.Except))
	for _, e := range b.Except {
		p, err := netip.ParsePrefix(e)
		if err != nil {
			return nil, fmt.Errorf("parse ipBlock except %q: %w", e, err)
		}
		except = append(except, p)
	}
	return policy.SubtractPrefixes(cidr, except), nil
}

// ipBlockKey is the content key of an ipBlock's addresses.
func ipBlockKey(prefixes []netip.Prefix) string {
	parts := make([]string, len(prefixes))
	for i, p := range prefixes {
		parts[i] = p.String()
	}
	return "b:" + strings.Join(parts, ",")
}
