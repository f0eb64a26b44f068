package ovs

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
)

// MonitorPacketIns runs `ovs-ofctl monitor` on the bridge and hands its output to read
// until read returns, ctx ends or the process exits. The monitor connects to the bridge's
// management socket as a service connection; its miss-len (65535) makes OVS send it
// asynchronous messages, so every controller action's packet-in reaches it, printed as
// NXT_PACKET_IN2 (-P nxt_packet_in2: with the flow's table, cookie and userdata). This is
// the one long-lived OpenFlow connection kovs keeps; everything else is ovs-ofctl per
// request (docs/audit.md says why).
func (c *OpenFlow) MonitorPacketIns(ctx context.Context, read func(io.Reader) error) error {
	cmd := exec.CommandContext(ctx, c.ofctl, "-O", c.protocol, "--no-names", "monitor", c.target, "65535", "-P", "nxt_packet_in2")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("monitor bridge %s: %w", c.bridge, err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("monitor bridge %s: %w", c.bridge, err)
	}
	readErr := read(out)
	_ = cmd.Process.Kill()
	waitErr := cmd.Wait()
	if readErr != nil {
		return fmt.Errorf("monitor bridge %s: %w", c.bridge, readErr)
	}
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("monitor bridge %s: ovs-ofctl exited: %v: %s", c.bridge, waitErr, strings.TrimSpace(stderr.String()))
}
