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

// apiForwarder gives processes inside the node namespace (kovs-agent, kubectl run there) a
// kube-apiserver address on the node's own loopback: it listens inside the node namespace
// and dials the real kube-apiserver on the root namespace's loopback. A listening socket
// keeps the namespace it was created in, so only the listen happens inside the namespace.
type apiForwarder struct {
	listenAddr string
	target     string
}

func (f apiForwarder) run(ctx context.Context, netnsPath string) error {
	var ln net.Listener
	err := ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", f.listenAddr)
		return err
	})
	if err != nil {
		return fmt.Errorf("listen on %s in %s: %w", f.listenAddr, netnsPath, err)
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
			return fmt.Errorf("accept on %s: %w", f.listenAddr, err)
		}
		go f.relay(c)
	}
}

func (f apiForwarder) relay(in net.Conn) {
	defer in.Close()
	out, err := net.Dial("tcp", f.target)
	if err != nil {
		log.WithError(err).WithField("target", f.target).Warn("forwarder cannot reach kube-apiserver")
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
