package kovsctl

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
	"github.com/kovs-net/kovs/go-controller/pkg/nodestatus"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// DefaultAgentAddress is where kovs-agent serves /status on its node (--metrics-listen).
const DefaultAgentAddress = "127.0.0.1:9092"

// Names of the ports the agent creates on br-int (its defaults).
const (
	tunnelPortName  = "kovs-tun0"
	gatewayPortName = "kovs-gw0"
)

// StatusRequest says which nodes `kovsctl status` looks at and how to reach their agents.
type StatusRequest struct {
	Nodes []string
	// AgentAddress is the agent's metrics listener (host:port) as seen from the node.
	AgentAddress string
	// AgentNetNS returns the network namespace the node's agent listens in, by name or
	// path; "" (or a nil func) is kovsctl's own namespace.
	AgentNetNS func(node string) string
	// Timeout bounds each node's checks (default 10 s).
	Timeout time.Duration
}

// Status is what `kovsctl status` found, node by node.
type Status struct {
	OK    bool         `json:"ok"`
	Nodes []NodeReport `json:"nodes"`
}

// NodeReport is one node: the agent's own account, what OVS shows, and every problem.
type NodeReport struct {
	Node string `json:"node"`
	// Agent is the agent's /status, nil when it could not be read (AgentError says why).
	Agent      *nodestatus.Status `json:"agent,omitempty"`
	AgentError string             `json:"agentError,omitempty"`
	OVS        OVSReport          `json:"ovs"`
	// ExpectedPeers are the other Nodes with subnets, as the API has them.
	ExpectedPeers []string `json:"expectedPeers"`
	Problems      []string `json:"problems"`
}

// OVSReport is the node's OVS as kovsctl sees it directly.
type OVSReport struct {
	DatabaseOK bool `json:"databaseOK"`
	BridgeOK   bool `json:"bridgeOK"`
	VswitchdOK bool `json:"vswitchdOK"`
	TunnelOK   bool `json:"tunnelOK"`
	GatewayOK  bool `json:"gatewayOK"`
	// Flows counts the flows the agent installs on br-int; Learned the flows the switch
	// learned itself (SCTP replies), which the agent does not install.
	Flows   int    `json:"flows"`
	Learned int    `json:"learned"`
	Error   string `json:"error,omitempty"`
}

// Status checks every requested node.
func (a Access) Status(ctx context.Context, req StatusRequest) (*Status, error) {
	if len(req.Nodes) == 0 {
		return nil, fmt.Errorf("status: no node given (--node)")
	}
	if req.Timeout == 0 {
		req.Timeout = 10 * time.Second
	}
	if req.AgentAddress == "" {
		req.AgentAddress = DefaultAgentAddress
	}
	peers, err := a.expectedPeers(ctx)
	if err != nil {
		return nil, err
	}
	st := &Status{OK: true}
	for _, node := range req.Nodes {
		nctx, cancel := context.WithTimeout(ctx, req.Timeout)
		r := a.nodeReport(nctx, req, node, peers)
		cancel()
		st.OK = st.OK && len(r.Problems) == 0
		st.Nodes = append(st.Nodes, r)
	}
	return st, nil
}

// expectedPeers lists the nodes with subnets recorded by kovs-controller.
func (a Access) expectedPeers(ctx context.Context) ([]string, error) {
	list, err := a.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var names []string
	for _, n := range list.Items {
		if _, ok := n.Annotations[ipam.NodeSubnetsAnnotationKey]; ok && len(internalIPs(&n)) > 0 {
			names = append(names, n.Name)
		}
	}
	sort.Strings(names)
	return names, nil
}

func (a Access) nodeReport(ctx context.Context, req StatusRequest, node string, withSubnets []string) NodeReport {
	r := NodeReport{Node: node, ExpectedPeers: []string{}, Problems: []string{}}
	for _, n := range withSubnets {
		if n != node {
			r.ExpectedPeers = append(r.ExpectedPeers, n)
		}
	}
	netns := ""
	if req.AgentNetNS != nil {
		netns = req.AgentNetNS(node)
	}
	if st, err := fetchAgentStatus(ctx, req.AgentAddress, netns); err != nil {
		r.AgentError = err.Error()
	} else {
		r.Agent = st
	}
	r.OVS = a.ovsReport(ctx, node)
	r.Problems = problems(r)
	return r
}

// fetchAgentStatus reads the agent's /status, from inside netns when given.
func fetchAgentStatus(ctx context.Context, addr, netns string) (*nodestatus.Status, error) {
	client := &http.Client{Transport: &http.Transport{DialContext: DialIn(netns), DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+nodestatus.Path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("kovs-agent does not answer on %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("kovs-agent /status on %s: %s", addr, resp.Status)
	}
	var st nodestatus.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("kovs-agent /status on %s: %w", addr, err)
	}
	return &st, nil
}

// DialIn returns a dialer whose sockets are created in the named network namespace
// (a name under /run/netns or a path; "" is the caller's own).
func DialIn(netns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	if netns == "" {
		return d.DialContext
	}
	path := netns
	if !strings.Contains(netns, "/") {
		path = filepath.Join("/run/netns", netns)
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		err := ns.WithNetNSPath(path, func(ns.NetNS) error {
			var err error
			conn, err = d.DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}
}

// ovsReport checks the node's OVS directly: the database, br-int and its tunnel and
// gateway ports, ovs-vswitchd (through a flow dump) and the flows kovs owns.
func (a Access) ovsReport(ctx context.Context, node string) OVSReport {
	var r OVSReport
	o, err := a.connect(ctx, node)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer o.Close()
	r.DatabaseOK = true
	ports, err := o.db.Ports(ctx, Bridge)
	if err != nil {
		r.Error = fmt.Sprintf("bridge %s: %v", Bridge, err)
	} else {
		r.BridgeOK = true
		for _, p := range ports {
			ok := p.Ofport > 0 && p.Error == ""
			switch p.Name {
			case tunnelPortName:
				r.TunnelOK = ok
			case gatewayPortName:
				r.GatewayOK = ok
			}
		}
	}
	flows, err := o.of.DumpFlows(ctx, 0, 0)
	if err != nil {
		if r.Error == "" {
			r.Error = fmt.Sprintf("ovs-vswitchd: %v", err)
		}
		return r
	}
	r.VswitchdOK = true
	for _, f := range flows {
		switch c := pipeline.Cookie(f.Cookie); {
		case c.Learned():
			r.Learned++
		case c.Owned():
			r.Flows++
		}
	}
	return r
}
