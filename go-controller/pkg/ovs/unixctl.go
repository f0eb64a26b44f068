package ovs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/cenkalti/rpc2"
	"github.com/cenkalti/rpc2/jsonrpc"
)

// Unixctl is one connection to an OVS daemon's unixctl server, which speaks JSON-RPC 1.0
// (a method, an array of string params, a string result or a string error): what
// ovs-appctl sends, one command per process, and what this sends many commands over,
// without a process for each. The JSON-RPC is cenkalti/rpc2's, which libovsdb uses for
// OVSDB.
type Unixctl struct {
	client *rpc2.Client
}

// DialUnixctl connects to the unixctl socket target names, found now as ovs-appctl -t
// finds it: a path, or a daemon's name, whose socket is <rundir>/<name>.<pid>.ctl with
// the pid read from <rundir>/<name>.pid (rundir "" is $OVS_RUNDIR or /var/run/openvswitch).
func DialUnixctl(ctx context.Context, target, rundir string) (*Unixctl, error) {
	path, err := UnixctlPath(target, rundir)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("connect to the unixctl socket %s: %w", path, err)
	}
	c := &Unixctl{client: rpc2.NewClientWithCodec(jsonrpc.NewJSONCodec(conn))}
	go c.client.Run()
	return c, nil
}

// UnixctlPath is the socket ovs-appctl -t target would use: target itself if it is a
// path, else <rundir>/<target>.<pid>.ctl with the pid read from <rundir>/<target>.pid
// (rundir "" is $OVS_RUNDIR or /var/run/openvswitch).
func UnixctlPath(target, rundir string) (string, error) {
	if strings.Contains(target, "/") {
		return target, nil
	}
	if rundir == "" {
		rundir = orDefault(os.Getenv("OVS_RUNDIR"), "/var/run/openvswitch")
	}
	b, err := os.ReadFile(filepath.Join(rundir, target+".pid"))
	if err != nil {
		return "", fmt.Errorf("find the unixctl socket of %s: %w", target, err)
	}
	return filepath.Join(rundir, fmt.Sprintf("%s.%s.ctl", target, strings.TrimSpace(string(b)))), nil
}

// Call runs one command and returns its output. A command the daemon ran and failed
// returns its error text as a *UnixctlError.
func (c *Unixctl) Call(ctx context.Context, method string, params ...string) (string, error) {
	var out string
	return out, unixctlErr(method, c.client.CallWithContext(ctx, method, orEmpty(params), &out))
}

// CallEach runs method once for each params in turn, all of them sent before the first
// answer is read, and returns their errors in that order (nil for those that passed).
// It stops early only when ctx ends or the connection fails.
func (c *Unixctl) CallEach(ctx context.Context, method string, params [][]string) ([]error, error) {
	done := make(chan *rpc2.Call, len(params))
	calls := make([]*rpc2.Call, len(params))
	for i, p := range params {
		var out string
		calls[i] = c.client.Go(method, orEmpty(p), &out, done)
	}
	for range calls {
		select {
		case <-done:
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: %w", method, ctx.Err())
		}
	}
	errs := make([]error, len(calls))
	for i, call := range calls {
		errs[i] = unixctlErr(method, call.Error)
		var ue *UnixctlError
		if errs[i] != nil && !errors.As(errs[i], &ue) {
			return nil, errs[i]
		}
	}
	return errs, nil
}

// Close closes the connection.
func (c *Unixctl) Close() error { return c.client.Close() }

func orEmpty(params []string) []string {
	if params == nil {
		return []string{}
	}
	return params
}

func unixctlErr(method string, err error) error {
	var se rpc2.ServerError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se):
		return &UnixctlError{Method: method, Text: strings.TrimSpace(string(se))}
	default:
		return fmt.Errorf("%s: %w", method, err)
	}
}

// UnixctlError is a command's failure as the daemon answered it.
type UnixctlError struct {
	Method, Text string
}

func (e *UnixctlError) Error() string { return e.Method + ": " + e.Text }
