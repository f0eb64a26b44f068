package datapathbench_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

const (
	bulkPort = 5201
	rrPort   = 5202
	// bulkChunk is what the sender hands the socket per write, and the receiver reads.
	bulkChunk = 256 << 10
	// rrSize is the request and the response of one round trip.
	rrSize = 64
)

// server is a pair of listeners (bulk TCP, request/response) opened inside one network
// namespace; its sockets stay in that namespace whatever thread later uses them.
type server struct {
	bulk, rr *net.TCPListener
}

// bulkResult is what the receiver saw of one bulk transfer.
type bulkResult struct {
	bytes int64
	took  time.Duration // from the first byte read to the sender's close
	gap   time.Duration // the longest time between two reads
	err   error
}

// Mbps is the transfer's goodput in Mbit/s.
func (r bulkResult) Mbps() float64 { return float64(r.bytes) * 8 / r.took.Seconds() / 1e6 }

// listen opens the server's listeners on every address of the namespace at netnsPath.
func listen(netnsPath string) (*server, error) {
	s := &server{}
	var err error
	if s.bulk, err = listenIn(netnsPath, bulkPort); err != nil {
		return nil, err
	}
	if s.rr, err = listenIn(netnsPath, rrPort); err != nil {
		s.close()
		return nil, err
	}
	go s.serveRR()
	return s, nil
}

// listenIn opens a TCP listener on port inside the namespace at netnsPath.
func listenIn(netnsPath string, port int) (*net.TCPListener, error) {
	var ln *net.TCPListener
	err := ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		var err error
		ln, err = net.ListenTCP("tcp", &net.TCPAddr{Port: port})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %d/tcp in %s: %w", port, netnsPath, err)
	}
	return ln, nil
}

func (s *server) close() {
	for _, l := range []*net.TCPListener{s.bulk, s.rr} {
		if l != nil {
			_ = l.Close()
		}
	}
}

// serveRR echoes every rrSize-byte request of every connection until the listener closes.
func (s *server) serveRR() {
	for {
		conn, err := s.rr.AcceptTCP()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			buf := make([]byte, rrSize)
			for {
				if _, err := io.ReadFull(conn, buf); err != nil {
					return
				}
				if _, err := conn.Write(buf); err != nil {
					return
				}
			}
		}()
	}
}

// receiveBulk accepts one connection on l and reads it to its end.
func receiveBulk(l *net.TCPListener, timeout time.Duration) <-chan bulkResult {
	out := make(chan bulkResult, 1)
	go func() {
		_ = l.SetDeadline(time.Now().Add(timeout))
		conn, err := l.AcceptTCP()
		if err != nil {
			out <- bulkResult{err: fmt.Errorf("accept: %w", err)}
			return
		}
		defer conn.Close()
		_ = conn.SetReadDeadline(time.Now().Add(timeout))
		buf := make([]byte, bulkChunk)
		var r bulkResult
		var first, last time.Time
		for {
			n, err := conn.Read(buf)
			if n > 0 {
				now := time.Now()
				if first.IsZero() {
					first = now
				} else {
					r.gap = max(r.gap, now.Sub(last))
				}
				last = now
			}
			r.bytes += int64(n)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				r.err = fmt.Errorf("read after %d bytes: %w", r.bytes, err)
				break
			}
		}
		r.took = time.Since(first)
		out <- r
	}()
	return out
}

// dialFrom connects to addr:port from inside the namespace at netnsPath.
func dialFrom(ctx context.Context, netnsPath string, addr netip.Addr, port int) (*net.TCPConn, error) {
	var conn net.Conn
	err := ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		var err error
		d := net.Dialer{Timeout: 5 * time.Second}
		conn, err = d.DialContext(ctx, "tcp", net.JoinHostPort(addr.String(), strconv.Itoa(port)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("connect from %s to %s:%d: %w", netnsPath, addr, port, err)
	}
	return conn.(*net.TCPConn), nil
}

// bulk sends as much as it can for d from the client namespace to the server at addr,
// and returns what the server received.
func bulk(ctx context.Context, srv *server, clientNS string, addr netip.Addr, d time.Duration) (bulkResult, error) {
	r, err := sendBulk(ctx, srv.bulk, clientNS, addr, bulkPort, d, nil)
	if err != nil {
		return r, err
	}
	if r.bytes == 0 {
		return r, fmt.Errorf("nothing received in %s", d)
	}
	return r, nil
}

// sendBulk sends as much as it can for d on one connection from the client namespace to
// addr:port, where l accepts it, and returns what l's side received. sent, if set, is
// called with the sender's connection once the receiver has read it to its end.
func sendBulk(ctx context.Context, l *net.TCPListener, clientNS string, addr netip.Addr, port int, d time.Duration,
	sent func(*net.TCPConn) error) (bulkResult, error) {
	received := receiveBulk(l, d+30*time.Second)
	conn, err := dialFrom(ctx, clientNS, addr, port)
	if err != nil {
		_ = l.SetDeadline(time.Now()) // end the accept
		<-received
		return bulkResult{}, err
	}
	defer conn.Close()
	buf := make([]byte, bulkChunk)
	end := time.Now().Add(d)
	_ = conn.SetWriteDeadline(end.Add(30 * time.Second))
	var sendErr error
	for time.Now().Before(end) {
		if _, err := conn.Write(buf); err != nil {
			sendErr = fmt.Errorf("send: %w", err)
			break
		}
	}
	_ = conn.CloseWrite()
	r := <-received
	var sentErr error
	if sent != nil {
		sentErr = sent(conn)
	}
	return r, errors.Join(sendErr, r.err, sentErr)
}

// rrResult is the round-trip times of one request/response run, sorted.
type rrResult []time.Duration

// p is the p-th percentile (nearest rank).
func (r rrResult) p(p int) time.Duration {
	i := (p*len(r)+99)/100 - 1
	return r[max(i, 0)]
}

// requestResponse makes warm+n round trips of rrSize bytes each way on one connection
// from the client namespace to the server at addr, and returns the last n times.
func requestResponse(ctx context.Context, clientNS string, addr netip.Addr, warm, n int) (rrResult, error) {
	conn, err := dialFrom(ctx, clientNS, addr, rrPort)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	req, resp := make([]byte, rrSize), make([]byte, rrSize)
	out := make(rrResult, 0, n)
	for i := range warm + n {
		req[0] = byte(i)
		t0 := time.Now()
		if _, err := conn.Write(req); err != nil {
			return nil, fmt.Errorf("round trip %d: send: %w", i, err)
		}
		if _, err := io.ReadFull(conn, resp); err != nil {
			return nil, fmt.Errorf("round trip %d: receive: %w", i, err)
		}
		took := time.Since(t0)
		if resp[0] != req[0] {
			return nil, fmt.Errorf("round trip %d: answer %d to request %d", i, resp[0], req[0])
		}
		if i >= warm {
			out = append(out, took)
		}
	}
	slices.Sort(out)
	return out, nil
}
