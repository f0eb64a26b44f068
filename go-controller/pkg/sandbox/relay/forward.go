// Package relay connects the sandbox's network namespaces to the servers of the root
// namespace and back: a Forward makes a root-namespace loopback server reachable on a
// node's own loopback, and an EgressProxy lets kube-apiserver, which runs in the root
// namespace, open connections that start inside a node namespace (to kubelets, pods and
// Services), as a control plane on the nodes' network would.
package relay

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/containernetworking/plugins/pkg/ns"
	log "github.com/sirupsen/logrus"
)

// Forward makes a server on the root namespace's loopback (kube-apiserver,
// kovs-controller's policy stream) reachable on the node's own loopback, for the processes
// inside the node namespace (kovs-agent, kubelet, kubectl run there): it listens inside the
// node namespace and dials Target from the root namespace. A listening socket keeps the
// namespace it was created in, so only the listen happens inside the namespace.
type Forward struct {
	// Name says what is forwarded, for logs.
	Name   string
	Listen string
	Target string
}

// Run serves the forward until ctx ends.
func (f Forward) Run(ctx context.Context, netnsPath string) error {
	var ln net.Listener
	err := ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", f.Listen)
		return err
	})
	if err != nil {
		return fmt.Errorf("forward %s: listen on %s in %s: %w", f.Name, f.Listen, netnsPath, err)
	}
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("forward %s: accept on %s: %w", f.Name, f.Listen, err)
		}
		go f.relay(c)
	}
}

func (f Forward) relay(in net.Conn) {
	defer in.Close()
	out, err := net.Dial("tcp", f.Target)
	if err != nil {
		log.WithError(err).WithField("target", f.Target).Warn("forwarder cannot reach " + f.Name)
		return
	}
	defer out.Close()
	pipe(in, out)
}

// pipe copies both ways until both directions are done, half-closing each as its source
// ends.
func pipe(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	half := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = tc.CloseWrite()
		}
	}
	go half(a, b)
	go half(b, a)
	wg.Wait()
}
