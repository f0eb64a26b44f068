// Package kovsctl is the operator's view of kovs: it traces a packet from a pod through
// br-int on the source node and, after the tunnel, on the destination node, and tells the
// story table by table; it lists flows by table name and pods by OVS port.
package kovsctl

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

// DefaultOVSDir is where a node's OVS keeps its database socket and bridge management
// sockets on a real node.
const DefaultOVSDir = "/var/run/openvswitch"

// Bridge is the bridge kovs owns on every node.
const Bridge = "br-int"

// Access reaches the cluster and the nodes' OVS.
type Access struct {
	Client kubernetes.Interface
	// PolicyAPI reads ClusterNetworkPolicies; nil: they are not listed.
	PolicyAPI versioned.Interface
	// OVSDir returns a node's OVS run directory (db.sock, br-int.mgmt, ovs-vswitchd's
	// unixctl socket). On a real node only the local node's is reachable.
	OVSDir func(node string) string
}

// DirTemplate returns an OVSDir function from a template in which "{node}" stands for
// the node name, e.g. /run/kovs-sandbox/demo/nodes/{node}/ovs.
func DirTemplate(template string) func(string) string {
	return func(node string) string { return strings.ReplaceAll(template, "{node}", node) }
}

// nodeOVS is one node's OVS.
type nodeOVS struct {
	db ovs.Store
	of *ovs.OpenFlow
}

// reachable says whether a node's OVS can be reached from here.
func (a Access) reachable(node string) error {
	dir := a.OVSDir(node)
	if _, err := os.Stat(filepath.Join(dir, "db.sock")); err != nil {
		return fmt.Errorf("node %s: no OVS database socket in %s (on a real node run kovsctl on that node; in a sandbox pass --ovs-dir)", node, dir)
	}
	return nil
}

func (a Access) connect(ctx context.Context, node string) (*nodeOVS, error) {
	if err := a.reachable(node); err != nil {
		return nil, err
	}
	dir := a.OVSDir(node)
	db, err := ovs.NewOVSDB(ctx, "unix:"+filepath.Join(dir, "db.sock"))
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node, err)
	}
	cfg := ovs.OpenFlowConfig{Bridge: Bridge, RunDir: dir}
	if ctl := filepath.Join(dir, "ovs-vswitchd.ctl"); fileExists(ctl) {
		cfg.VswitchdCtl = ctl
	}
	of, err := ovs.NewOpenFlow(cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &nodeOVS{db: db, of: of}, nil
}

func (n *nodeOVS) Close() { n.db.Close() }

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
