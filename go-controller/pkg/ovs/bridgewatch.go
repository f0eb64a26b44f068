package ovs

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"

	log "github.com/sirupsen/logrus"
)

// OpenFlow message types this watcher speaks (the same numbers in every version).
const (
	ofptHello       = 0
	ofptEchoRequest = 2
	ofptEchoReply   = 3
	ofHeaderLen     = 8
)

// WatchBridge holds an idle OpenFlow connection to a bridge's management socket (for
// example unix:/var/run/openvswitch/br-int.mgmt, given as its path) and calls
// reconnected every time a connection is established after one was lost or could not
// be made: that is, after ovs-vswitchd restarted and came back with an empty flow
// table. A restarted vswitchd is then repaired at once instead of at the next periodic
// resync. It answers the switch's echo requests, and returns when ctx ends.
func WatchBridge(ctx context.Context, socket string, reconnected func()) {
	const minWait, maxWait = 100 * time.Millisecond, 2 * time.Second
	wait := minWait
	lost := false
	for ctx.Err() == nil {
		err := watchOnce(ctx, socket, func() {
			wait = minWait
			if lost {
				log.WithField("socket", socket).Info("ovs-vswitchd is back: resyncing the bridge")
				reconnected()
			}
		})
		if ctx.Err() != nil {
			return
		}
		if !lost {
			log.WithError(err).WithField("socket", socket).Warn("lost the OpenFlow connection to ovs-vswitchd")
		}
		lost = true
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, maxWait)
	}
}

// watchOnce connects, exchanges hellos, calls connected and then serves echo requests
// until the connection ends.
func watchOnce(ctx context.Context, socket string, connected func()) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if _, err := conn.Write(helloMessage()); err != nil {
		return fmt.Errorf("send hello: %w", err)
	}
	_, typ, _, _, err := readMessage(conn)
	if err != nil {
		return fmt.Errorf("read hello: %w", err)
	}
	if typ != ofptHello {
		return fmt.Errorf("expected a hello, got OpenFlow message type %d", typ)
	}
	connected()
	for {
		version, typ, xid, body, err := readMessage(conn)
		if err != nil {
			return err
		}
		if typ == ofptEchoRequest {
			// The request is in the negotiated version: so is the reply.
			if _, err := conn.Write(message(version, ofptEchoReply, xid, body)); err != nil {
				return fmt.Errorf("send echo reply: %w", err)
			}
		}
	}
}

// helloMessage offers OpenFlow 1.0 to 1.5 (a version bitmap element), so the switch
// accepts it whatever versions the bridge allows.
func helloMessage() []byte {
	elem := make([]byte, 8)
	binary.BigEndian.PutUint16(elem[0:], 1) // OFPHET_VERSIONBITMAP
	binary.BigEndian.PutUint16(elem[2:], 8)
	binary.BigEndian.PutUint32(elem[4:], 0x7e) // versions 0x01..0x06
	return message(0x06, ofptHello, 1, elem)
}

// message frames an OpenFlow message.
func message(version, typ uint8, xid uint32, body []byte) []byte {
	b := make([]byte, ofHeaderLen+len(body))
	b[0] = version
	b[1] = typ
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	binary.BigEndian.PutUint32(b[4:], xid)
	copy(b[ofHeaderLen:], body)
	return b
}

func readMessage(r io.Reader) (version, typ uint8, xid uint32, body []byte, err error) {
	var h [ofHeaderLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, 0, 0, nil, err
	}
	n := int(binary.BigEndian.Uint16(h[2:]))
	if n < ofHeaderLen {
		return 0, 0, 0, nil, fmt.Errorf("OpenFlow message of length %d", n)
	}
	body = make([]byte, n-ofHeaderLen)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, 0, 0, nil, err
	}
	return h[0], h[1], binary.BigEndian.Uint32(h[4:]), body, nil
}
