package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	log "github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"

	"github.com/kovs-net/kovs/go-controller/pkg/agent"
	"github.com/kovs-net/kovs/go-controller/pkg/policy/stream"
)

// policyFlags locate kovs-controller's policy stream and the agent's credentials for it.
type policyFlags struct {
	address    string
	tokenFile  string
	caConfig   string
	serverName string
}

// policyFeed returns the client of kovs-controller's policy stream, or nil when no
// controller address is given: the agent then enforces no NetworkPolicy. With a Service
// address, the client follows the replicas' Lease, which dist names as the Service: it
// dials the leader's pod first and leaves a connection as soon as another replica leads.
func policyFeed(ctx context.Context, f policyFlags, client kubernetes.Interface, node string, conns *agent.FeedConnections) (*stream.Client, error) {
	if f.address == "" {
		log.WithField("node", node).Warn("no --controller-address: NetworkPolicy is NOT enforced on this node")
		return nil, nil
	}
	if f.tokenFile == "" {
		return nil, fmt.Errorf("--controller-token-file is required with --controller-address (a ServiceAccount token bound to this node or to the agent's pod, audience %s)", stream.TokenAudience)
	}
	ns, name, ok := strings.Cut(f.caConfig, "/")
	if !ok || ns == "" || name == "" {
		return nil, fmt.Errorf("--controller-ca-configmap %q: use namespace/name", f.caConfig)
	}
	address := f.address
	dial := (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	svcNS, svcName, isService, err := stream.ParseServiceAddress(f.address)
	if err != nil {
		return nil, err
	}
	var leader *stream.LeaseLeader
	if isService {
		// The Service's name only labels the connection; its endpoints are dialed.
		address = net.JoinHostPort(svcName+"."+svcNS+".svc", strconv.Itoa(stream.DefaultPort))
		if leader, err = stream.FollowLease(ctx, client, svcNS, svcName); err != nil {
			return nil, fmt.Errorf("follow kovs-controller's Lease %s/%s: %w", svcNS, svcName, err)
		}
		dial = stream.ServiceDialer(client, svcNS, svcName, stream.StreamPortName, leader.Pod, dial)
	}
	cfg := stream.ClientConfig{
		Node:       node,
		Address:    address,
		ServerName: f.serverName,
		Token:      stream.TokenFile(f.tokenFile),
		RootCAs:    stream.CAFromConfigMap(client, ns, name),
		Dial:       conns.Dial(dial),
	}
	if leader != nil { // a nil *LeaseLeader would make a non-nil interface
		cfg.Leader = leader
	}
	return stream.NewClient(cfg)
}
