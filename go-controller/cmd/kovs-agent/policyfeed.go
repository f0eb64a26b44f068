package main

import (
	"fmt"
	"strings"

	log "github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"

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
// controller address is given: the agent then enforces no NetworkPolicy.
func policyFeed(f policyFlags, client kubernetes.Interface, node string) (*stream.Client, error) {
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
	return stream.NewClient(stream.ClientConfig{
		Node:       node,
		Address:    f.address,
		ServerName: f.serverName,
		Token:      stream.TokenFile(f.tokenFile),
		RootCAs:    stream.CAFromConfigMap(client, ns, name),
	})
}
