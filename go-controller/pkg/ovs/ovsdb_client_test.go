package ovs

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

func TestConnectionLost(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"libovsdb not connected", fmt.Errorf("x: ovsdb transaction: %w", client.ErrNotConnected), true},
		{"reply lost to a closed socket", fmt.Errorf("x: ovsdb transaction: %w", io.ErrUnexpectedEOF), true},
		{"reset", &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{"broken pipe", &net.OpError{Op: "write", Err: os.NewSyscallError("write", syscall.EPIPE)}, true},
		{"closed by the client", fmt.Errorf("x: %w", net.ErrClosed), true},
		{"refused by the server", &ovsdb.ConstraintViolation{}, false},
		{"deadline", fmt.Errorf("x: %w", errors.New("context deadline exceeded")), false},
		{"nil", nil, false},
	} {
		if got := connectionLost(tc.err); got != tc.want {
			t.Errorf("connectionLost(%s: %v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
