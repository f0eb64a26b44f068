package plugin

import (
	"context"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
)

// gc is CNI GC: the agent removes the ports of every sandbox not in the runtime's list of
// valid attachments. Host veths need no collecting: a veth dies with its pod's netns.
func (p *Plugin) gc(inv *invocation) error {
	valid := make([]cni.Attachment, 0, len(inv.conf.ValidAttachments))
	for _, a := range inv.conf.ValidAttachments {
		valid = append(valid, cni.Attachment{ContainerID: a.ContainerID, IfName: a.IfName})
	}
	inv.log = inv.log.WithField("valid", len(valid))
	ctx, cancel := context.WithTimeout(context.Background(), agentCallTimeout)
	defer cancel()
	if err := inv.agent.GC(ctx, valid); err != nil {
		return fmt.Errorf("garbage-collect pod ports in kovs-agent: %w", err)
	}
	return nil
}

// status is CNI STATUS: ready when the agent says it is. Otherwise the error has code 50
// (plugin not available), so the runtime reports the node's network not ready.
func (p *Plugin) status(inv *invocation) error {
	ctx, cancel := context.WithTimeout(context.Background(), agentCallTimeout)
	defer cancel()
	err := inv.agent.Status(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, cni.ErrAgentUnreachable):
		return withCode(types.ErrPluginNotAvailable, err)
	default:
		return withCode(types.ErrPluginNotAvailable, fmt.Errorf("kovs-agent not ready: %w", err))
	}
}
