package framework

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// Transfer is one bulk TCP transfer's outcome: what the receiver got, over how long.
type Transfer struct {
	Bytes   int64
	Elapsed time.Duration // from the connection's start to the receiver's last byte
}

// BitsPerSecond is the transfer's rate as the receiver saw it.
func (x Transfer) BitsPerSecond() float64 {
	if x.Elapsed <= 0 {
		return 0
	}
	return float64(x.Bytes) * 8 / x.Elapsed.Seconds()
}

func (x Transfer) String() string {
	return fmt.Sprintf("%.1f Mbit/s (%d bytes in %s)", x.BitsPerSecond()/1e6, x.Bytes, x.Elapsed.Round(time.Millisecond))
}

// BulkTransfer sends as fast as TCP goes from the client from to a listener at to:port
// in the client at (to is one of at's addresses) for d, and returns what arrived. Both
// sockets are made in their clients' network namespaces; the copying runs on ordinary
// goroutines (a socket stays in the namespace it was made in).
func BulkTransfer(from, at Client, to netip.Addr, port uint16, d time.Duration) (Transfer, error) {
	addr := net.JoinHostPort(to.String(), strconv.Itoa(int(port)))
	var ln net.Listener
	if err := ns.WithNetNSPath(at.NetNS, func(ns.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		return Transfer{}, fmt.Errorf("listen at %s in %s: %w", addr, at.Name, err)
	}
	defer ln.Close()
	type received struct {
		n    int64
		last time.Time
		err  error
	}
	done := make(chan received, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- received{err: err}
			return
		}
		defer c.Close()
		n, err := io.Copy(io.Discard, c)
		done <- received{n: n, last: time.Now(), err: err}
	}()
	var conn net.Conn
	if err := ns.WithNetNSPath(from.NetNS, func(ns.NetNS) error {
		var err error
		conn, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	}); err != nil {
		return Transfer{}, fmt.Errorf("connect from %s to %s: %w", from.Name, addr, err)
	}
	start := time.Now()
	werr := send(conn, start.Add(d))
	r := <-done
	if err := errors.Join(werr, r.err); err != nil {
		return Transfer{}, fmt.Errorf("transfer from %s to %s: %w", from.Name, addr, err)
	}
	return Transfer{Bytes: r.n, Elapsed: r.last.Sub(start)}, nil
}

// send writes to conn until the deadline, then closes it.
func send(conn net.Conn, until time.Time) error {
	defer conn.Close()
	buf := make([]byte, 64<<10)
	for time.Now().Before(until) {
		if _, err := conn.Write(buf); err != nil {
			return err
		}
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		return tc.CloseWrite()
	}
	return nil
}
