package roottest

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// stream sends numbered Ethernet frames into br0 through internal port from (its tap, in
// the node's network namespace) every interval, and counts those that come out of port
// to, which a flow forwards them to: traffic through ovs-vswitchd's datapath.
type stream struct {
	t         *testing.T
	send      int
	recv, rx  int
	mu        sync.Mutex
	seen      map[uint32]bool
	stopSend  chan struct{}
	stopRecv  chan struct{}
	sending   sync.WaitGroup
	done      sync.WaitGroup
	lastRecv  time.Time
	longest   time.Duration
	longestAt time.Time // when the longest gap ended
}

// startStream opens packet sockets on the taps of from and to, and starts sending.
func (n *node) startStream(from, to string, interval time.Duration) *stream {
	n.t.Helper()
	s := &stream{t: n.t, seen: map[uint32]bool{}, stopSend: make(chan struct{}), stopRecv: make(chan struct{})}
	var sendFD, recvFD, ifindex int
	err := ns.WithNetNSPath("/var/run/netns/"+n.netns, func(ns.NetNS) error {
		for _, name := range []string{from, to} {
			link, err := netlink.LinkByName(name)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetUp(link); err != nil {
				return err
			}
		}
		src, _ := netlink.LinkByName(from)
		dst, _ := netlink.LinkByName(to)
		ifindex = src.Attrs().Index
		var err error
		if sendFD, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0); err != nil {
			return err
		}
		proto := int(htons(0x88b5)) // local experimental EtherType: nothing else sends it
		if recvFD, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, proto); err != nil {
			return err
		}
		return unix.Bind(recvFD, &unix.SockaddrLinklayer{Protocol: htons(0x88b5), Ifindex: dst.Attrs().Index})
	})
	if err != nil {
		n.t.Fatalf("open the stream's sockets: %v", err)
	}
	tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(recvFD, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		n.t.Fatal(err)
	}
	s.done.Add(1)
	s.sending.Add(1)
	go func() { // receiver
		defer s.done.Done()
		defer unix.Close(recvFD)
		buf := make([]byte, 256)
		for {
			select {
			case <-s.stopRecv:
				return
			default:
			}
			n, from, err := unix.Recvfrom(recvFD, buf, 0)
			if err != nil || n < 18 {
				continue
			}
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
				continue
			}
			now := time.Now()
			s.mu.Lock()
			seq := binary.BigEndian.Uint32(buf[14:])
			if !s.seen[seq] {
				s.seen[seq] = true
				s.recv++
			}
			if !s.lastRecv.IsZero() && now.Sub(s.lastRecv) > s.longest {
				s.longest, s.longestAt = now.Sub(s.lastRecv), now
			}
			s.lastRecv = now
			s.mu.Unlock()
		}
	}()
	go func() { // sender
		defer s.sending.Done()
		defer unix.Close(sendFD)
		frame := make([]byte, 64)
		copy(frame[0:6], []byte{0x02, 0, 0, 0, 0, 2})
		copy(frame[6:12], []byte{0x02, 0, 0, 0, 0, 1})
		binary.BigEndian.PutUint16(frame[12:], 0x88b5)
		addr := &unix.SockaddrLinklayer{Ifindex: ifindex, Halen: 6}
		copy(addr.Addr[:], frame[0:6])
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for seq := uint32(0); ; seq++ {
			select {
			case <-s.stopSend:
				return
			case <-tick.C:
			}
			binary.BigEndian.PutUint32(frame[14:], seq)
			if err := unix.Sendto(sendFD, frame, 0, addr); err == nil {
				s.mu.Lock()
				s.send++
				s.mu.Unlock()
			}
		}
	}()
	return s
}

// received is how many distinct frames arrived so far.
func (s *stream) received() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recv
}

// finish stops sending, waits until every sent frame has arrived (at most 2 s), stops
// receiving, and returns sent, received, the longest time between two arrivals and when
// it ended.
func (s *stream) finish() (sent, received int, longest time.Duration, at time.Time) {
	close(s.stopSend)
	s.sending.Wait()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		s.mu.Lock()
		all := s.recv >= s.send
		s.mu.Unlock()
		if all {
			break
		}
	}
	close(s.stopRecv)
	s.done.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.send, s.recv, s.longest, s.longestAt
}

// waitReceived waits until n more frames than now have arrived (at most 10 s).
func (s *stream) waitReceived(n int) {
	s.t.Helper()
	want := s.received() + n
	for deadline := time.Now().Add(10 * time.Second); s.received() < want; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			s.t.Fatalf("the stream through br0 stalled: %s, want %d received", s, want)
		}
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (s *stream) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("%d sent, %d received", s.send, s.recv)
}
