package servingcert

import (
	"context"
	"crypto/tls"
	"sync/atomic"
	"time"

	log "github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"
)

// Serving is a certificate kept current: a server built on TLSConfig always presents the
// latest one.
type Serving struct {
	cert atomic.Pointer[tls.Certificate]
}

// Start ensures the certificate now, then again every interval (renewing it in time, and
// adopting one another replica issued) until ctx ends.
func Start(ctx context.Context, client kubernetes.Interface, cfg Config, interval time.Duration) (*Serving, error) {
	cert, err := Ensure(ctx, client, cfg)
	if err != nil {
		return nil, err
	}
	s := &Serving{}
	s.cert.Store(cert)
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cert, err := Ensure(ctx, client, cfg)
			if err != nil {
				log.WithError(err).Warn("could not check the policy stream's serving certificate, keeping the current one")
				continue
			}
			s.cert.Store(cert)
		}
	}()
	return s, nil
}

// TLSConfig returns a server configuration presenting the current certificate.
func (s *Serving) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.cert.Load(), nil
		},
	}
}
