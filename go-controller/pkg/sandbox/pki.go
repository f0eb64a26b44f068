package sandbox

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI file names inside Layout.PKIDir.
const (
	caCert        = "ca.crt"
	caKey         = "ca.key"
	apiserverCert = "apiserver.crt"
	apiserverKey  = "apiserver.key"
	adminCert     = "admin.crt"
	adminKey      = "admin.key"
	saKey         = "sa.key"
	saPub         = "sa.pub"
	// kube-apiserver's client certificate towards the kubelets (exec, logs, port-forward).
	kubeletClientCert = "apiserver-kubelet-client.crt"
	kubeletClientKey  = "apiserver-kubelet-client.key"
)

// certAuthority signs the sandbox's serving and client certificates.
type certAuthority struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// writePKI generates the cluster CA, the kube-apiserver serving certificate (valid for
// loopback and the in-cluster service names), an admin client certificate in
// system:masters, and the service-account signing key pair.
func writePKI(dir string, serviceIPs []net.IP) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, err := newCA("kovs-sandbox-ca")
	if err != nil {
		return err
	}
	if err := writeCertAndKey(dir, caCert, caKey, ca.cert, ca.key); err != nil {
		return err
	}
	serving := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		IPAddresses: append([]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}, serviceIPs...),
	}
	if err := ca.issue(dir, apiserverCert, apiserverKey, serving); err != nil {
		return err
	}
	admin := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kovs-sandbox-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := ca.issue(dir, adminCert, adminKey, admin); err != nil {
		return err
	}
	kubeletClient := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := ca.issue(dir, kubeletClientCert, kubeletClientKey, kubeletClient); err != nil {
		return err
	}
	return writeServiceAccountKey(dir)
}

func newCA(cn string) (*certAuthority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: cn},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	setValidity(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-sign CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &certAuthority{cert: cert, key: key}, nil
}

func (ca *certAuthority) issue(dir, certFile, keyFile string, tmpl *x509.Certificate) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	setValidity(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return fmt.Errorf("sign %s: %w", certFile, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return err
	}
	return writeCertAndKey(dir, certFile, keyFile, cert, key)
}

// loadCA reads the CA writePKI wrote.
func loadCA(dir string) (*certAuthority, error) {
	cb, err := os.ReadFile(filepath.Join(dir, caCert))
	if err != nil {
		return nil, err
	}
	kb, err := os.ReadFile(filepath.Join(dir, caKey))
	if err != nil {
		return nil, err
	}
	cblock, _ := pem.Decode(cb)
	kblock, _ := pem.Decode(kb)
	if cblock == nil || kblock == nil {
		return nil, fmt.Errorf("%s: the CA certificate or key is not PEM", dir)
	}
	cert, err := x509.ParseCertificate(cblock.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParsePKCS8PrivateKey(kblock.Bytes)
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: the CA key cannot sign", dir)
	}
	return &certAuthority{cert: cert, key: signer}, nil
}

// issueNodeClientCert issues a node's kubelet client certificate (user system:node:<node>
// in group system:nodes, which the Node authorizer and NodeRestriction know) and returns
// it and its key as PEM.
func issueNodeClientCert(dir, node string) (certPEM, keyPEM []byte, err error) {
	ca, err := loadCA(dir)
	if err != nil {
		return nil, nil, err
	}
	name := "kubelet-" + node
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := ca.issue(dir, name+".crt", name+".key", tmpl); err != nil {
		return nil, nil, err
	}
	if certPEM, err = os.ReadFile(filepath.Join(dir, name+".crt")); err != nil {
		return nil, nil, err
	}
	keyPEM, err = os.ReadFile(filepath.Join(dir, name+".key"))
	return certPEM, keyPEM, err
}

func setValidity(c *x509.Certificate) {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	c.SerialNumber = serial
	c.NotBefore = time.Now().Add(-time.Hour)
	c.NotAfter = time.Now().Add(10 * 365 * 24 * time.Hour)
}

func writeCertAndKey(dir, certFile, keyFile string, cert *x509.Certificate, key crypto.Signer) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, certFile), "CERTIFICATE", cert.Raw, 0o644); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, keyFile), "PRIVATE KEY", keyDER, 0o600)
}

// writeServiceAccountKey writes the RSA key kube-apiserver signs tokens with and
// kube-controller-manager's token controller uses.
func writeServiceAccountKey(dir string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, saKey), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key), 0o600); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, saPub), "PUBLIC KEY", pub, 0o644)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, b, mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
