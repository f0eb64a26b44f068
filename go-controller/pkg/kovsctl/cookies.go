package kovsctl

import (
	"fmt"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// cookieOwners names the owner a flow's cookie encodes.
type cookieOwners struct {
	nodes map[string]nodeInfo
}

func (o cookieOwners) describe(c pipeline.Cookie, ports map[int]string) string {
	switch c.Category() {
	case pipeline.CategoryBase:
		return "pipeline"
	case pipeline.CategoryGateway:
		return "gateway"
	case pipeline.CategoryPod:
		if name, ok := ports[int(c.Object())]; ok {
			return name
		}
		return fmt.Sprintf("pod on port %d", c.Object())
	case pipeline.CategoryTunnelPeer:
		for name := range o.nodes {
			if pipeline.PeerObjectID(name) == c.Object() {
				return "peer node " + name
			}
		}
		return "a peer node"
	case 0:
		return "not a kovs flow"
	}
	return fmt.Sprintf("cookie %s", c)
}
