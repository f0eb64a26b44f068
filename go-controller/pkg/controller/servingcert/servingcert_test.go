package servingcert

import (
	"bytes"
	"context"
	"crypto/x509"
	"net"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func testConfig(names ...string) Config {
	return Config{Namespace: "kube-system", SecretName: "kovs-controller-tls", ConfigMap: "kovs-ca",
		DNSNames: append(ServiceDNSNames("kube-system", "kovs-controller"), names...), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
}

// verify checks that cert chains to the CA published in the ConfigMap, for name.
func verify(t *testing.T, c *fake.Clientset, certDER []byte, name string) {
	t.Helper()
	cm, err := c.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "kovs-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(cm.Data[CAKey])) {
		t.Fatal("no CA in the ConfigMap")
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
		t.Errorf("serving certificate for %s: %v", name, err)
	}
}

func secretCA(t *testing.T, c *fake.Clientset) []byte {
	t.Helper()
	s, err := c.CoreV1().Secrets("kube-system").Get(context.Background(), "kovs-controller-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s.Data[keyCACert]
}

func TestEnsureCreatesThenReuses(t *testing.T) {
	c := fake.NewClientset()
	ctx := context.Background()
	first, err := Ensure(ctx, c, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	verify(t, c, first.Certificate[0], "kovs-controller.kube-system.svc")
	second, err := Ensure(ctx, c, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.Certificate[0], second.Certificate[0]) {
		t.Error("a second replica (or a restart) got another certificate")
	}
}

func TestMissingNameIsReissuedFromTheSameCA(t *testing.T) {
	c := fake.NewClientset()
	ctx := context.Background()
	if _, err := Ensure(ctx, c, testConfig()); err != nil {
		t.Fatal(err)
	}
	ca := secretCA(t, c)
	cert, err := Ensure(ctx, c, testConfig("kovs.example"))
	if err != nil {
		t.Fatal(err)
	}
	verify(t, c, cert.Certificate[0], "kovs.example")
	if !bytes.Equal(ca, secretCA(t, c)) {
		t.Error("reissuing the serving certificate changed the CA: agents would need the new one")
	}
}

func TestExpiringCertificateIsRenewed(t *testing.T) {
	c := fake.NewClientset()
	ctx := context.Background()
	short := testConfig()
	short.Validity = 10 * 24 * time.Hour
	old, err := Ensure(ctx, c, short)
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := Ensure(ctx, c, testConfig()) // RenewBefore 30 days > 10 days left
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(old.Certificate[0], renewed.Certificate[0]) {
		t.Error("a certificate expiring within RenewBefore was kept")
	}
	cert, _ := x509.ParseCertificate(renewed.Certificate[0])
	if time.Until(cert.NotAfter) < 300*24*time.Hour {
		t.Errorf("renewed certificate ends %s", cert.NotAfter)
	}
}

func TestUnusableSecretIsReplacedAndCAPublished(t *testing.T) {
	c := fake.NewClientset()
	ctx := context.Background()
	if _, err := Ensure(ctx, c, testConfig()); err != nil {
		t.Fatal(err)
	}
	s, _ := c.CoreV1().Secrets("kube-system").Get(ctx, "kovs-controller-tls", metav1.GetOptions{})
	s.Data[keyCAKey] = []byte("garbage")
	if _, err := c.CoreV1().Secrets("kube-system").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cert, err := Ensure(ctx, c, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	verify(t, c, cert.Certificate[0], "kovs-controller") // the ConfigMap follows the new CA
}
