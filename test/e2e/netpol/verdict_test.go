package netpol_test

// TestCellVerdictNeedsMoreThanSilence checks the truth tables' verdict itself, with the
// probe code the tables use (probeFromNetNS, classify, mismatches) against a real kernel:
// one network namespace (its name starts kovs-verdict-), a responder in it, and nftables
// rules that lose chosen handshake packets. It needs root, not a sandbox, and skips
// without it.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
)

// lossyRules lose packets of the probes on loopback, one port per kind of loss: on 80/tcp
// the first SYN of every connection, on 81/tcp the first SYN-ACK, on 80/udp the first
// datagram from every source port; on 82/tcp every SYN (a policy's drop). 83/tcp loses
// nothing.
const lossyRules = `
table inet verdict {
	set synSeen { type inet_service; flags dynamic; }
	set synAckSeen { type inet_service; flags dynamic; }
	set udpSeen { type inet_service; flags dynamic; }
	chain in {
		type filter hook input priority 0; policy accept;
		tcp dport 80 tcp flags & (syn | ack) == syn tcp sport != @synSeen add @synSeen { tcp sport } drop
		udp dport 80 udp sport != @udpSeen add @udpSeen { udp sport } drop
		tcp dport 82 tcp flags & (syn | ack) == syn drop
	}
	chain out {
		type filter hook output priority 0; policy accept;
		tcp sport 81 tcp flags & (syn | ack) == (syn | ack) tcp dport != @synAckSeen add @synAckSeen { tcp dport } drop
	}
}
`

func TestCellVerdictNeedsMoreThanSilence(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network namespace and nftables rules")
	}
	nsPath := lossyNamespace(t)
	const pod = "x/a"
	var ports []responder.Port
	for _, p := range []string{"80/tcp", "81/tcp", "82/tcp", "83/tcp", "80/udp"} {
		port, err := responder.ParsePort(p)
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, port)
	}
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		r, err := responder.Serve(context.Background(), ports, pod)
		if err == nil {
			t.Cleanup(func() { r.Close() })
		}
		return err
	})
	if err != nil {
		t.Fatalf("responder: %v", err)
	}

	loopback := netip.MustParseAddr("127.0.0.1")
	var counts slowCells
	src := uint16(firstSourcePort)
	probe := func(port string) outcome {
		src++
		o := probeFromNetNS(context.Background(), nsPath, loopback, port, src, pod)
		counts.record(o)
		return o
	}
	cases := []struct {
		port, what string
		allowed    bool // the path lets the connection through
		slow       bool // only after a retransmission
	}{
		{"83/tcp", "nothing lost", true, false},
		{"80/tcp", "the first SYN lost", true, true},
		{"81/tcp", "the first SYN-ACK lost", true, true},
		{"80/udp", "the first datagram lost", true, false},
		{"82/tcp", "every SYN dropped", false, false},
	}
	got := observed{}
	asExpected, wronglyAllowed := map[cellKey]bool{}, map[cellKey]bool{}
	for _, c := range cases {
		o := probe(c.port)
		cell := cellKey{Port: c.port, From: "y/b", To: pod}
		got[cell] = o
		asExpected[cell] = c.allowed
		wronglyAllowed[cell] = false
		switch {
		case o.err != "":
			t.Errorf("%s, %s: probe error %s", c.port, c.what, o.err)
		case o.allowed != c.allowed:
			t.Errorf("%s, %s: allowed=%v after %s, want allowed=%v (budget %s)", c.port, c.what, o.allowed, o.took, c.allowed, cellBudget)
		case c.allowed && (o.took > firstRetransmit) != c.slow:
			t.Errorf("%s, %s: answered after %s, want slow (after %s) = %v", c.port, c.what, o.took, firstRetransmit, c.slow)
		case !c.allowed && o.took < cellBudget:
			t.Errorf("%s, %s: denied after %s, before the budget %s ran out", c.port, c.what, o.took, cellBudget)
		}
	}
	// A dropped packet on an allowed path is not read as denied: the table as the path is
	// matches; and a wrongly allowed cell is caught even when its SYN was lost: expecting
	// every cell denied, each allowed path is a mismatch, marked !A.
	if bad := got.mismatches(asExpected); len(bad) > 0 {
		t.Errorf("expected verdicts differ in %v:\n%s", bad, got.render(asExpected, []string{"y/b", pod}))
	}
	caught := got.mismatches(wronglyAllowed)
	if len(caught) != 4 {
		t.Errorf("expecting every cell denied, %d cells are caught, want the 4 allowed ones:\n%s", len(caught), got.render(wronglyAllowed, []string{"y/b", pod}))
	}
	if r := got.render(wronglyAllowed, []string{"y/b", pod}); strings.Count(r, "!A") != 4 {
		t.Errorf("the 4 wrongly allowed cells are not all marked !A:\n%s", r)
	}
	if counts.connected != 4 || counts.slowCount != 2 {
		t.Errorf("the run's count: %d connected, %d slow; want 4 and 2 (the lost SYN and SYN-ACK)", counts.connected, counts.slowCount)
	}
}

// lossyNamespace creates a network namespace with loopback up and lossyRules loaded,
// deleted when the test ends, and returns its path.
func lossyNamespace(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	name := "kovs-verdict-" + hex.EncodeToString(b)
	run := func(stdin string, args ...string) {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdin = strings.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("", "ip", "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("delete netns %s: %v: %s", name, err, out)
		}
	})
	run("", "ip", "-n", name, "link", "set", "lo", "up")
	run(lossyRules, "ip", "netns", "exec", name, "nft", "-f", "-")
	return "/run/netns/" + name
}
