package responder_test

import (
	"context"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
)

// Needs root (network namespaces).
func TestSessionEchoesUntilClosed(t *testing.T) {
	link := newTestLink(t, true)
	serve(t, link.Server, "ns1/server", "8080/tcp")
	target, err := responder.ParseTarget(hostPort(serverV4, 8080) + "/tcp")
	if err != nil {
		t.Fatal(err)
	}
	var s *responder.Session
	inNamespace(t, link.Client, func() {
		s, err = responder.Dial(context.Background(), target, timeout)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Reply.Identity != "ns1/server" || s.Reply.Peer.Addr() != clientV4 {
		t.Fatalf("session line %+v", s.Reply)
	}
	for i := 0; i < 5; i++ {
		if err := s.Echo(time.Second); err != nil {
			t.Fatalf("round trip %d: %v", i, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
