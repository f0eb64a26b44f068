// Package servingcert gives kovs-controller the certificate it serves the policy stream
// with: a CA of its own and a serving certificate issued by it, kept in a Secret so that
// every replica (and every restart) serves the same identity, and the CA published in a
// ConfigMap that agents read through kube-apiserver.
//
// The Secret is created if absent: when two replicas race, the one that loses the create
// adopts the winner's. A serving certificate that lacks a required name, or expires within
// RenewBefore, is reissued from the same CA, so agents need no new CA. A Secret whose CA
// is unusable is replaced (agents then pick up the new CA from the ConfigMap when they
// reconnect).
package servingcert

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Keys of the Secret (a kubernetes.io/tls Secret with the CA added).
const (
	keyCert   = corev1.TLSCertKey
	keyKey    = corev1.TLSPrivateKeyKey
	keyCACert = "ca.crt"
	keyCAKey  = "ca.key"
	// CAKey is the key of the CA bundle in the ConfigMap.
	CAKey = "ca.crt"
)

// Config names where the certificate lives and what it must be valid for.
type Config struct {
	Namespace   string // of the Secret and the ConfigMap
	SecretName  string
	ConfigMap   string
	DNSNames    []string
	IPAddresses []net.IP
	// Validity of a serving certificate (default one year); RenewBefore its end it is
	// reissued (default 30 days). The CA is valid for ten years.
	Validity, RenewBefore time.Duration
}

func (c *Config) defaults() {
	if c.Validity == 0 {
		c.Validity = 365 * 24 * time.Hour
	}
	if c.RenewBefore == 0 {
		c.RenewBefore = 30 * 24 * time.Hour
	}
}

// ServiceDNSNames are the names of a Service, short to fully qualified.
func ServiceDNSNames(namespace, name string) []string {
	return []string{name, name + "." + namespace, name + "." + namespace + ".svc", name + "." + namespace + ".svc.cluster.local"}
}

// Ensure returns the serving certificate, creating or renewing it in the Secret, and
// makes sure the ConfigMap publishes its CA.
func Ensure(ctx context.Context, client kubernetes.Interface, cfg Config) (*tls.Certificate, error) {
	cfg.defaults()
	pair, err := ensureSecret(ctx, client, cfg)
	if err != nil {
		return nil, err
	}
	if err := publishCA(ctx, client, cfg, pair.caPEM); err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(pair.certPEM, pair.keyPEM)
	if err != nil {
		return nil, fmt.Errorf("serving certificate in Secret %s/%s: %w", cfg.Namespace, cfg.SecretName, err)
	}
	return &cert, nil
}

// material is the PEM content of the Secret.
type material struct {
	caPEM, caKeyPEM, certPEM, keyPEM []byte
}

func (m material) data() map[string][]byte {
	return map[string][]byte{keyCACert: m.caPEM, keyCAKey: m.caKeyPEM, keyCert: m.certPEM, keyKey: m.keyPEM}
}

func ensureSecret(ctx context.Context, client kubernetes.Interface, cfg Config) (material, error) {
	secrets := client.CoreV1().Secrets(cfg.Namespace)
	for attempt := 0; attempt < 5; attempt++ {
		secret, err := secrets.Get(ctx, cfg.SecretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			m, err := newMaterial(cfg, nil)
			if err != nil {
				return material{}, err
			}
			_, err = secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: cfg.SecretName, Namespace: cfg.Namespace},
				Type: corev1.SecretTypeTLS, Data: m.data()}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue // another replica won: adopt its certificate
			}
			if err == nil {
				log.WithField("secret", cfg.Namespace+"/"+cfg.SecretName).Info("created the policy stream's CA and serving certificate")
			}
			return m, err
		}
		if err != nil {
			return material{}, fmt.Errorf("get Secret %s/%s: %w", cfg.Namespace, cfg.SecretName, err)
		}
		m := material{caPEM: secret.Data[keyCACert], caKeyPEM: secret.Data[keyCAKey], certPEM: secret.Data[keyCert], keyPEM: secret.Data[keyKey]}
		why := m.renewal(cfg)
		if why == "" {
			return m, nil
		}
		ca, _ := m.authority()
		if m, err = newMaterial(cfg, ca); err != nil {
			return material{}, err
		}
		secret.Data = m.data()
		if _, err := secrets.Update(ctx, secret, metav1.UpdateOptions{}); apierrors.IsConflict(err) {
			continue
		} else if err != nil {
			return material{}, fmt.Errorf("update Secret %s/%s: %w", cfg.Namespace, cfg.SecretName, err)
		}
		log.WithField("secret", cfg.Namespace+"/"+cfg.SecretName).WithField("reason", why).Info("reissued the policy stream's serving certificate")
		return m, nil
	}
	return material{}, fmt.Errorf("Secret %s/%s keeps changing under us", cfg.Namespace, cfg.SecretName)
}

// renewal says why the material must be (re)issued, or "" if it is good.
func (m material) renewal(cfg Config) string {
	if _, err := m.authority(); err != nil {
		return "unusable CA: " + err.Error()
	}
	pair, err := tls.X509KeyPair(m.certPEM, m.keyPEM)
	if err != nil {
		return "unusable serving certificate: " + err.Error()
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return "unusable serving certificate: " + err.Error()
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(m.caPEM)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: time.Now().Add(cfg.RenewBefore)}); err != nil {
		return "serving certificate not valid for long enough: " + err.Error()
	}
	for _, name := range cfg.DNSNames {
		if !slices.Contains(cert.DNSNames, name) {
			return "missing name " + name
		}
	}
	for _, ip := range cfg.IPAddresses {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return "missing address " + ip.String()
		}
	}
	return ""
}

// authority is a CA certificate and its key.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func (m material) authority() (*authority, error) {
	pair, err := tls.X509KeyPair(m.caPEM, m.caKeyPEM)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || !cert.IsCA || time.Now().After(cert.NotAfter.Add(-365*24*time.Hour)) {
		return nil, errors.New("not an ECDSA CA valid for another year")
	}
	return &authority{cert: cert, key: key}, nil
}

// newMaterial issues a serving certificate from ca, or from a new CA when ca is nil.
func newMaterial(cfg Config, ca *authority) (material, error) {
	var m material
	if ca == nil {
		var err error
		if ca, err = newAuthority(); err != nil {
			return m, err
		}
	}
	caKeyDER, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		return m, err
	}
	m.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})
	m.caKeyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: caKeyDER})
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return m, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kovs-controller"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(cfg.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     cfg.DNSNames,
		IPAddresses:  cfg.IPAddresses,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return m, fmt.Errorf("issue the serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return m, err
	}
	m.certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	m.keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	return m, nil
}

func newAuthority() (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "kovs-controller-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("create the CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// publishCA makes the ConfigMap hold exactly the CA.
func publishCA(ctx context.Context, client kubernetes.Interface, cfg Config, caPEM []byte) error {
	cms := client.CoreV1().ConfigMaps(cfg.Namespace)
	cm, err := cms.Get(ctx, cfg.ConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cfg.ConfigMap, Namespace: cfg.Namespace},
			Data: map[string]string{CAKey: string(caPEM)}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return publishCA(ctx, client, cfg, caPEM)
		}
		return err
	}
	if err != nil {
		return fmt.Errorf("get ConfigMap %s/%s: %w", cfg.Namespace, cfg.ConfigMap, err)
	}
	if cm.Data[CAKey] == string(caPEM) {
		return nil
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[CAKey] = string(caPEM)
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update ConfigMap %s/%s: %w", cfg.Namespace, cfg.ConfigMap, err)
	}
	return nil
}
