package netpol_test

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
)

// cellKey is one cell of a truth table: from one pod to another on one port ("80/tcp"),
// over IPv4 or IPv6.
type cellKey struct {
	Port     string
	IPv6     bool
	From, To string
}

// column is the port and family part of a cell: one matrix of the rendering.
func (c cellKey) column() string {
	return c.Port + " " + familyName(c.IPv6)
}

func (c cellKey) String() string {
	return fmt.Sprintf("%s -> %s %s", c.From, c.To, c.column())
}

func familyName(ipv6 bool) string {
	if ipv6 {
		return "ipv6"
	}
	return "ipv4"
}

// familiesOf lists the address families probed in a sandbox of family ("dual": both).
func familiesOf(family string) []bool {
	switch family {
	case "ipv6":
		return []bool{true}
	case "dual":
		return []bool{false, true}
	}
	return []bool{false}
}

// target is a pod as the truth table sees it: its key and the ports its responder serves.
type target struct {
	key   string
	ports []corev1.ContainerPort
}

// serves reports whether the pod's responder listens on port ("80/tcp"): only those cells
// are probed, since a probe to a port nobody serves is refused whatever the policy.
func (p target) serves(port string) bool {
	want, err := responder.ParsePort(port)
	if err != nil {
		return false
	}
	for _, cp := range p.ports {
		proto := strings.ToLower(string(cp.Protocol))
		if proto == "" {
			proto = "tcp"
		}
		if cp.ContainerPort == int32(want.Number) && proto == string(want.Protocol) {
			return true
		}
	}
	return false
}

// cellsOf lists the cells a step probes: every ordered pair of pods, on every probed port
// the destination serves, over every family, sorted.
func cellsOf(ports []string, families []bool, pods []target) []cellKey {
	var cells []cellKey
	for _, port := range ports {
		for _, v6 := range families {
			for _, from := range pods {
				for _, to := range pods {
					if to.serves(port) {
						cells = append(cells, cellKey{Port: port, IPv6: v6, From: from.key, To: to.key})
					}
				}
			}
		}
	}
	sort.Slice(cells, func(i, j int) bool { return cells[i].String() < cells[j].String() })
	return cells
}

// outcome is what a probe of a cell saw: allowed, denied (no answer within cellBudget:
// policy drops), or an error (anything else, which is neither); took is how long the
// probe ran.
type outcome struct {
	allowed bool
	err     string
	took    time.Duration
}

// classify reads a probe result sent to pod want.
func classify(r responder.Result, want string) outcome {
	o := classifyResult(r, want)
	o.took = r.Duration
	return o
}

func classifyResult(r responder.Result, want string) outcome {
	switch {
	case r.Connected && r.Reply != nil && r.Reply.Identity == want:
		return outcome{allowed: true}
	case r.Connected && r.Reply != nil:
		return outcome{err: "answered by " + r.Reply.Identity + ", not " + want}
	case r.Connected:
		return outcome{err: "connected without a responder line: " + r.Error}
	case r.TimedOut:
		return outcome{}
	case r.Refused:
		return outcome{err: "refused (the packet reached a host that rejected it): " + r.Error}
	}
	return outcome{err: "probe failed: " + strings.TrimSpace(r.Error)}
}

// observed is what one round of probes saw, cell by cell.
type observed map[cellKey]outcome

// mismatches lists the cells that differ from want, errors included.
func (o observed) mismatches(want map[cellKey]bool) []cellKey {
	var bad []cellKey
	for c, w := range want {
		got, ok := o[c]
		if !ok || got.err != "" || got.allowed != w {
			bad = append(bad, c)
		}
	}
	sort.Slice(bad, func(i, j int) bool { return bad[i].String() < bad[j].String() })
	return bad
}

// render prints one matrix per column: "." allowed as expected, "X" denied as expected,
// "!A" allowed though expected denied, "!D" denied though expected allowed, "E" an error
// (listed after the matrices), "-" not probed (the destination does not serve the port),
// "?" not probed in this round.
func (o observed) render(want map[cellKey]bool, keys []string) string {
	byPlace := map[[3]string]cellKey{}
	columns := map[string]bool{}
	for c := range want {
		columns[c.column()] = true
		byPlace[[3]string{c.column(), c.From, c.To}] = c
	}
	var b strings.Builder
	var errs []string
	for _, col := range sortedSet(columns) {
		fmt.Fprintf(&b, "%-14s", col)
		for _, to := range keys {
			fmt.Fprintf(&b, " %-4s", to)
		}
		b.WriteString("\n")
		for _, from := range keys {
			fmt.Fprintf(&b, "%-14s", from)
			for _, to := range keys {
				sym := "-"
				if c, ok := byPlace[[3]string{col, from, to}]; ok {
					sym = o.symbol(c, want[c])
					if sym == "E" {
						errs = append(errs, fmt.Sprintf("E %s: %s", c, o[c].err))
					}
				}
				fmt.Fprintf(&b, " %-4s", sym)
			}
			b.WriteString("\n")
		}
	}
	for _, e := range errs {
		b.WriteString(e + "\n")
	}
	return b.String()
}

func (o observed) symbol(c cellKey, exp bool) string {
	got, ok := o[c]
	switch {
	case !ok:
		return "?"
	case got.err != "":
		return "E"
	case got.allowed && exp:
		return "."
	case !got.allowed && !exp:
		return "X"
	case got.allowed:
		return "!A"
	}
	return "!D"
}

func sortedSet(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// probePort is a probed port as the model takes it.
type probePort struct {
	number   int32
	protocol corev1.Protocol
}

func parseProbePort(port string) (probePort, error) {
	p, err := responder.ParsePort(port)
	if err != nil {
		return probePort{}, fmt.Errorf("probe port %q: %w", port, err)
	}
	return probePort{number: int32(p.Number), protocol: corev1.Protocol(strings.ToUpper(string(p.Protocol)))}, nil
}
