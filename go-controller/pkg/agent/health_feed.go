package agent

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
)

// DialFunc dials a network address.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// FeedConnections counts the open connections a dialer made, so that readiness and status
// can say whether the policy stream to kovs-controller is connected
// (Config.PolicyFeedConnected = Connected).
type FeedConnections struct{ open atomic.Int64 }

// Dial returns dial, counting the connections it makes until they are closed.
func (f *FeedConnections) Dial(dial DialFunc) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		f.open.Add(1)
		return &countedConn{Conn: c, open: &f.open}, nil
	}
}

// Connected reports whether a connection is open.
func (f *FeedConnections) Connected() bool { return f.open.Load() > 0 }

type countedConn struct {
	net.Conn
	open *atomic.Int64
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}
