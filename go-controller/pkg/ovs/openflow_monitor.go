package ovs

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
)

// MonitorPacketIns runs `ovs-ofctl monitor` on the bridge and hands its output to read
// until read returns, ctx ends or the process exits. The monitor connects to the bridge's
// management socket as a service connection; its miss-len (65535) makes OVS send it
// asynchronous messages, so every controller action's packet-in reaches it, printed as
// NXT_PACKET_IN2 (-P nxt_packet_in2: with the flow's table, cookie and userdata). This is
// the one long-lived OpenFlow connection kovs keeps; everything else is ovs-ofctl per
// request (docs/audit.md says why). --unixctl=none: ovs-ofctl monitor would otherwise
// open a control socket of its own in OVS's run directory and exit at once where that
// directory does not exist (a machine with no system OVS: seen on a fresh CI machine).
func (c *OpenFlow) MonitorPacketIns(ctx context.Context, read func(io.Reader) error) error {
	cmd := exec.CommandContext(ctx, c.ofctl, "-O", c.protocol, "--no-names", "--unixctl=none", "monitor", c.target, "65535", "-P", "nxt_packet_in2")
	// ovs-ofctl monitor prints the messages it receives on standard error (and its own
	// errors there too): read both.
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("monitor bridge %s: %w", c.bridge, err)
	}
	defer r.Close()
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	w.Close()
	if err != nil {
		return fmt.Errorf("monitor bridge %s: %w", c.bridge, err)
	}
	var out lastBytes
	readErr := read(io.TeeReader(r, &out))
	_ = cmd.Process.Kill()
	waitErr := cmd.Wait()
	if readErr != nil {
		return fmt.Errorf("monitor bridge %s: %w", c.bridge, readErr)
	}
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("monitor bridge %s: ovs-ofctl exited: %v; it printed last: %q", c.bridge, waitErr, out.b)
}

// lastBytes keeps the last bytes written to it: what a process that exited said last.
type lastBytes struct{ b []byte }

const lastBytesKept = 512

func (l *lastBytes) Write(p []byte) (int, error) {
	l.b = append(l.b, p...)
	if len(l.b) > lastBytesKept {
		l.b = append(l.b[:0], l.b[len(l.b)-lastBytesKept:]...)
	}
	return len(p), nil
}
