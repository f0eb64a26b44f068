package emulator

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
// inside the node namespace (kovs-agent, kubectl run there): it listens inside the node
// namespace and dials Target from the root namespace. A listening socket keeps the
// namespace it was created in, so only the listen happens inside the namespace.
type Forward struct {
	// Name says what is forwarded, for logs.
	Name   string
	Listen string
	Target string
}

func (f Forward) run(ctx context.Context, netnsPath string) error {
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
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}
	go pipe(out, in)
	go pipe(in, out)
	wg.Wait()
}
