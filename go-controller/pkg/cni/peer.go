package cni

import (
	"context"
	"fmt"
	"net"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// rootListener accepts only connections whose peer runs as root or as this process's
// user (SO_PEERCRED, as the kernel recorded it at connect): the socket's mode already
// keeps others out, this holds if the mode is ever loosened (a bind mount, a chmod). A
// refused peer's connection is closed at once, and logged with its pid and uid.
type rootListener struct {
	*net.UnixListener
	uid int // this process's effective uid when it started serving
	log logrus.FieldLogger
}

// peerConn is an accepted connection and its peer's credentials.
type peerConn struct {
	*net.UnixConn
	cred *unix.Ucred
}

func (l rootListener) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		cred, err := peerCredentials(c)
		if err == nil && (cred.Uid == 0 || int(cred.Uid) == l.uid) {
			return peerConn{UnixConn: c, cred: cred}, nil
		}
		entry := l.log.WithError(err)
		if cred != nil {
			entry = entry.WithField("peerPID", cred.Pid).WithField("peerUID", cred.Uid)
		}
		entry.Warn("refused a CNI connection: only root may talk to kovs-agent")
		_ = c.Close()
	}
}

// peerCredentials reads the connection's peer credentials.
func peerCredentials(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if credErr != nil {
		return nil, fmt.Errorf("peer credentials: %w", credErr)
	}
	return cred, nil
}

type peerKey struct{}

// withPeer puts the connection's peer credentials in its requests' context.
func withPeer(ctx context.Context, c net.Conn) context.Context {
	if pc, ok := c.(peerConn); ok {
		return context.WithValue(ctx, peerKey{}, pc.cred)
	}
	return ctx
}

// peerFields are the log fields naming the process that sent the request.
func peerFields(ctx context.Context) logrus.Fields {
	if cred, ok := ctx.Value(peerKey{}).(*unix.Ucred); ok {
		return logrus.Fields{"peerPID": cred.Pid, "peerUID": cred.Uid}
	}
	return logrus.Fields{}
}
