package responder_test

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
)

// The ports the test responders serve, and one nothing serves.
const (
	tcpPort    = 8080
	udpPort    = 8053
	sctpPort   = 8132
	closedPort = 9
	timeout    = 2 * time.Second
	dropWait   = 400 * time.Millisecond
)

var (
	servedPorts = []string{"8080/tcp", "8053/udp", "8132/sctp"}
	protocols   = map[string]int{"tcp": tcpPort, "udp": udpPort, "sctp": sctpPort}
)

// expectConnected checks a probe that must reach the responder from client,
// and that the responder saw the probe's own address and port.
func expectConnected(t *testing.T, res responder.Result, identity string, client netip.Addr) {
	t.Helper()
	if !res.Connected || res.Refused || res.Error != "" || res.Reply == nil {
		t.Fatalf("probe %s: want connected with a reply, got %+v", res.Target, res)
	}
	if res.Reply.Identity != identity || res.Reply.Port != res.Target.Port {
		t.Errorf("probe %s: reply %v, want identity %s port %s", res.Target, res.Reply, identity, res.Target.Port)
	}
	if res.Reply.Peer != res.Local || res.Local.Addr() != client {
		t.Errorf("probe %s: responder saw %s, probe used %s, want %s", res.Target, res.Reply.Peer, res.Local, client)
	}
}

func TestProbeConnects(t *testing.T) {
	link := newTestLink(t, true)
	serve(t, link.Server, "ns1/server", append(servedPorts, "8080/TCP")...) // a duplicate is harmless
	for _, fam := range []struct{ server, client netip.Addr }{
		{serverV4, clientV4}, {serverV6, clientV6}, {serverV4b, clientV4}, {serverV6b, clientV6},
	} {
		for proto, port := range protocols {
			target := hostPort(fam.server, port) + "/" + proto
			t.Run(target, func(t *testing.T) {
				expectConnected(t, probe(t, link.Client, target, timeout), "ns1/server", fam.client)
			})
		}
	}
}

// TestProbeFromPort: a probe from a chosen source port uses it, for every protocol and
// family, and again after a probe from the same port (a second connection of the same
// tuple).
func TestProbeFromPort(t *testing.T) {
	link := newTestLink(t, true)
	serve(t, link.Server, "ns1/server", servedPorts...)
	src := uint16(23456)
	for _, fam := range []struct{ server, client netip.Addr }{{serverV4, clientV4}, {serverV6, clientV6}} {
		for proto, port := range protocols {
			tgt, err := responder.ParseTarget(hostPort(fam.server, port) + "/" + proto)
			if err != nil {
				t.Fatal(err)
			}
			src++
			for range 2 {
				var res responder.Result
				inNamespace(t, link.Client, func() { res = responder.ProbeFromPort(context.Background(), tgt, src, timeout) })
				expectConnected(t, res, "ns1/server", fam.client)
				if res.Local.Port() != src {
					t.Errorf("probe %s from port %d left from %s", tgt, src, res.Local)
				}
			}
		}
	}
}

func TestClosedPortIsRefused(t *testing.T) {
	link := newTestLink(t, true)
	serve(t, link.Server, "ns1/server", servedPorts...)
	for _, addr := range []netip.Addr{serverV4, serverV6} {
		for proto := range protocols {
			target := hostPort(addr, closedPort) + "/" + proto
			t.Run(target, func(t *testing.T) {
				res := probe(t, link.Client, target, timeout)
				if res.Connected || !res.Refused || res.Duration > timeout/2 {
					t.Errorf("want refused quickly, got %+v", res)
				}
			})
		}
	}
}

// TestSCTPWithoutResponderIsRefused: with no raw SCTP socket open, a kernel
// without SCTP answers an INIT with ICMP protocol unreachable (IPv4) or a
// parameter problem (IPv6), which the probe reports as refused.
func TestSCTPWithoutResponderIsRefused(t *testing.T) {
	link := newTestLink(t, true)
	serve(t, link.Server, "ns1/server", "8080/tcp") // no SCTP port: no raw socket
	for _, addr := range []netip.Addr{serverV4, serverV6} {
		res := probe(t, link.Client, hostPort(addr, sctpPort)+"/sctp", timeout)
		if res.Connected || !res.Refused || !strings.Contains(res.Error, "protocol unreachable") {
			t.Errorf("SCTP to %s without responder: want refused (protocol unreachable), got %+v", addr, res)
		}
	}
}

func TestDroppedPathTimesOut(t *testing.T) {
	link := newTestLink(t, true)
	serve(t, link.Server, "ns1/server", servedPorts...)
	for _, addr := range []netip.Addr{deadV4, deadV6} {
		for proto, port := range protocols {
			target := hostPort(addr, port) + "/" + proto
			t.Run(target, func(t *testing.T) {
				t.Parallel()
				res := probe(t, link.Client, target, dropWait)
				if res.Connected || res.Refused || !res.TimedOut || res.Error == "" || res.Duration < dropWait {
					t.Errorf("want a time-out after %v, got %+v", dropWait, res)
				}
			})
		}
	}
}

func TestBlackholeRouteFails(t *testing.T) {
	link := newTestLink(t, true)
	for _, addr := range []netip.Addr{blackholeV4, blackholeV6} {
		for proto, port := range protocols {
			target := hostPort(addr, port) + "/" + proto
			res := probe(t, link.Client, target, dropWait)
			if res.Connected || res.Refused || res.TimedOut || res.Error == "" {
				t.Errorf("%s: want not connected with an error other than a time-out, got %+v", target, res)
			}
		}
	}
}

func TestProbeCancelled(t *testing.T) {
	link := newTestLink(t, true)
	for proto, port := range protocols {
		tgt, _ := responder.ParseTarget(hostPort(deadV4, port) + "/" + proto)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		var res responder.Result
		inNamespace(t, link.Client, func() { res = responder.Probe(ctx, tgt, time.Minute) })
		cancel()
		if res.Connected || res.Duration > time.Second {
			t.Errorf("%s: want the context to end the probe, got %+v", tgt, res)
		}
	}
}

func TestCloseReleasesPorts(t *testing.T) {
	link := newTestLink(t, true)
	first := serve(t, link.Server, "first", servedPorts...)
	for _, port := range []string{"8080/tcp", "8053/udp"} {
		var err error
		inNamespace(t, link.Server, func() {
			_, err = responder.Serve(context.Background(), parsePorts(t, []string{port}), "second")
		})
		if err == nil || !strings.Contains(err.Error(), port) || !strings.Contains(err.Error(), "in use") {
			t.Errorf("Serve on busy %s: want an error naming the port, got %v", port, err)
		}
	}
	if err := first.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if res := probe(t, link.Client, hostPort(serverV4, tcpPort)+"/tcp", timeout); !res.Refused {
		t.Errorf("after Close: want refused, got %+v", res)
	}
	serve(t, link.Server, "again", servedPorts...)
	for proto, port := range protocols {
		expectConnected(t, probe(t, link.Client, hostPort(serverV4, port)+"/"+proto, timeout), "again", clientV4)
	}
}

func TestContextStopsResponder(t *testing.T) {
	link := newTestLink(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	var err error
	inNamespace(t, link.Server, func() {
		_, err = responder.Serve(ctx, parsePorts(t, servedPorts), "ctx")
	})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	target := hostPort(serverV4, tcpPort) + "/tcp"
	for start := time.Now(); time.Since(start) < timeout; time.Sleep(20 * time.Millisecond) {
		if res := probe(t, link.Client, target, timeout); res.Refused {
			return
		}
	}
	t.Errorf("responder still serves %s after its context was cancelled", target)
}

func TestIPv6OnlyNamespace(t *testing.T) {
	link := newTestLink(t, false)
	serve(t, link.Server, "v6only", servedPorts...)
	for proto, port := range protocols {
		expectConnected(t, probe(t, link.Client, hostPort(serverV6, port)+"/"+proto, timeout), "v6only", clientV6)
	}
}

// TestProbeOwnNamespace probes the responder from its own namespace, where
// the probe's and the responder's raw SCTP sockets both see every packet.
func TestProbeOwnNamespace(t *testing.T) {
	link := newTestLink(t, true)
	serve(t, link.Server, "self", servedPorts...)
	for _, addr := range []netip.Addr{serverV4, serverV6, netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()} {
		for proto, port := range protocols {
			expectConnected(t, probe(t, link.Server, hostPort(addr, port)+"/"+proto, timeout), "self", addr)
		}
		if res := probe(t, link.Server, hostPort(addr, closedPort)+"/sctp", timeout); !res.Refused {
			t.Errorf("SCTP to closed port on %s: want refused, got %+v", addr, res)
		}
	}
}

// TestIPv4OnlyNamespace serves in a namespace with IPv6 disabled by sysctl.
func TestIPv4OnlyNamespace(t *testing.T) {
	link := newTestLink(t, true)
	name := strings.TrimPrefix(link.Server, "/run/netns/")
	for _, key := range []string{"all", "default", "lo", "eth0"} {
		sysctl := "net.ipv6.conf." + key + ".disable_ipv6=1"
		if out, err := exec.Command("ip", "netns", "exec", name, "sysctl", "-w", sysctl).CombinedOutput(); err != nil {
			t.Fatalf("sysctl %s: %v: %s", sysctl, err, out)
		}
	}
	serve(t, link.Server, "v4only", servedPorts...)
	for proto, port := range protocols {
		expectConnected(t, probe(t, link.Client, hostPort(serverV4, port)+"/"+proto, timeout), "v4only", clientV4)
	}
}

// TestLateLineIsStillAnAnswer: a server that accepts at once but whose line comes after
// the probe's deadline (as a line lost once comes after a 3 s retransmission timeout)
// is connected and named, with the time it took; one that never sends a line is still
// an error, after LineGrace.
func TestLateLineIsStillAnAnswer(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	tgt, err := responder.ParseTarget(ln.Addr().String() + "/tcp")
	if err != nil {
		t.Fatal(err)
	}
	const lineAfter = 500 * time.Millisecond
	silent := make(chan struct{})
	t.Cleanup(func() { close(silent) })
	go func() {
		for n := 0; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if n == 0 {
				time.Sleep(lineAfter) // the server's line is late, not lost
				c.Write(responder.Line{Identity: "ns1/late", Port: tgt.Port, Peer: netip.MustParseAddrPort(c.RemoteAddr().String())}.Marshal())
				c.Close()
				continue
			}
			go func() { <-silent; c.Close() }() // the second connection never gets a line
		}
	}()
	const budget = 100 * time.Millisecond
	res := responder.Probe(context.Background(), tgt, budget)
	if !res.Connected || res.Reply == nil || res.Reply.Identity != "ns1/late" || res.Duration < lineAfter {
		t.Errorf("a line %s late after a %s budget: want connected, named ns1/late, after %s; got %+v", lineAfter, budget, lineAfter, res)
	}
	res = responder.Probe(context.Background(), tgt, budget)
	if !res.Connected || res.Reply != nil || !strings.Contains(res.Error, "read no line") || res.Duration < responder.LineGrace {
		t.Errorf("no line at all: want connected without a line after LineGrace (%s), got %+v", responder.LineGrace, res)
	}
}
