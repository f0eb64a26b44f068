package responder_test

// Tests in this package (responder_test) need root: they create network
// namespaces and veth pairs with iproute2 and run the responder and probes in
// them. They skip when not run as root.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
)

// Addresses of the two ends of a test link, and addresses nobody answers.
var (
	serverV4 = netip.MustParseAddr("10.99.0.1")
	clientV4 = netip.MustParseAddr("10.99.0.2")
	serverV6 = netip.MustParseAddr("fd99::1")
	clientV6 = netip.MustParseAddr("fd99::2")
	// Second server addresses: replies from them must not take the source
	// address routing would pick (the first one).
	serverV4b = netip.MustParseAddr("10.99.0.100")
	serverV6b = netip.MustParseAddr("fd99::100")
	// On the link, with a static neighbour entry pointing at a MAC address
	// nobody has: packets leave and are silently dropped by the peer.
	deadV4 = netip.MustParseAddr("10.99.0.9")
	deadV6 = netip.MustParseAddr("fd99::9")
	// Routed to a blackhole in the client namespace.
	blackholeV4 = netip.MustParseAddr("10.99.9.9")
	blackholeV6 = netip.MustParseAddr("fd99:9::9")
)

// testLink is two network namespaces, server and client, joined by a veth
// pair; both are deleted when the test ends.
type testLink struct {
	Server string // path of the server namespace
	Client string // path of the client namespace
}

// requireRoot skips the test unless it runs as root.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces and veth pairs (run as root, e.g. sudo go test)")
	}
}

// ip runs an iproute2 command and fails the test if it fails.
func ip(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// newNamespace creates a network namespace named kovs-resp-<id>-<role> with
// its loopback up, deleted at cleanup; it returns the name and the path.
func newNamespace(t *testing.T, id, role string) (name, path string) {
	t.Helper()
	name = fmt.Sprintf("kovs-resp-%s-%s", id, role)
	ip(t, "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("delete netns %s: %v: %s", name, err, out)
		}
	})
	ip(t, "-n", name, "link", "set", "lo", "up")
	return name, "/run/netns/" + name
}

// newTestLink creates the namespaces and the veth pair, with IPv4 addresses
// if withV4 and IPv6 addresses (no DAD, so they are usable at once) always.
func newTestLink(t *testing.T, withV4 bool) testLink {
	t.Helper()
	requireRoot(t)
	id := randomID(t)
	srv, srvPath := newNamespace(t, id, "srv")
	cli, cliPath := newNamespace(t, id, "cli")
	ip(t, "link", "add", "name", "eth0", "netns", srv, "type", "veth", "peer", "name", "eth0", "netns", cli)
	for _, end := range []struct {
		ns     string
		v4, v6 netip.Addr
	}{{srv, serverV4, serverV6}, {cli, clientV4, clientV6}} {
		if withV4 {
			ip(t, "-n", end.ns, "addr", "add", end.v4.String()+"/24", "dev", "eth0")
		}
		ip(t, "-n", end.ns, "addr", "add", end.v6.String()+"/64", "dev", "eth0", "nodad")
		ip(t, "-n", end.ns, "link", "set", "eth0", "up")
	}
	if withV4 {
		ip(t, "-n", srv, "addr", "add", serverV4b.String()+"/24", "dev", "eth0")
	}
	ip(t, "-n", srv, "addr", "add", serverV6b.String()+"/64", "dev", "eth0", "nodad")
	if withV4 {
		ip(t, "-n", cli, "neigh", "add", deadV4.String(), "lladdr", "02:00:00:00:00:09", "dev", "eth0", "nud", "permanent")
		ip(t, "-n", cli, "route", "add", "blackhole", blackholeV4.String()+"/32")
	}
	ip(t, "-n", cli, "neigh", "add", deadV6.String(), "lladdr", "02:00:00:00:00:09", "dev", "eth0", "nud", "permanent")
	ip(t, "-n", cli, "-6", "route", "add", "blackhole", blackholeV6.String()+"/128")
	return testLink{Server: srvPath, Client: cliPath}
}

// randomID returns 8 random hex digits to keep namespace names unique.
func randomID(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// inNamespace runs f on a thread in the namespace at path, as the node
// emulator does.
func inNamespace(t *testing.T, path string, f func()) {
	t.Helper()
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		f()
		return nil
	})
	if err != nil {
		t.Fatalf("enter netns %s: %v", path, err)
	}
}

// serve starts a responder in the namespace at path, closed at cleanup.
func serve(t *testing.T, path, identity string, ports ...string) *responder.Responder {
	t.Helper()
	var r *responder.Responder
	var err error
	inNamespace(t, path, func() {
		r, err = responder.Serve(context.Background(), parsePorts(t, ports), identity)
	})
	if err != nil {
		t.Fatalf("Serve: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// parsePorts parses "80/tcp"-style ports.
func parsePorts(t *testing.T, ports []string) []responder.Port {
	t.Helper()
	var out []responder.Port
	for _, s := range ports {
		p, err := responder.ParsePort(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// probe probes target (HOST:PORT/PROTO) from the namespace at path.
func probe(t *testing.T, path, target string, timeout time.Duration) responder.Result {
	t.Helper()
	tgt, err := responder.ParseTarget(target)
	if err != nil {
		t.Fatal(err)
	}
	var res responder.Result
	inNamespace(t, path, func() { res = responder.Probe(context.Background(), tgt, timeout) })
	return res
}

// hostPort joins an address and a port as in a target string.
func hostPort(a netip.Addr, port int) string {
	return netip.AddrPortFrom(a, uint16(port)).String()
}
