package stream

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TokenFile returns a Token function that reads the token from path every time, so that
// a token kubelet (or the sandbox) rotates is used from the next connection on.
func TokenFile(path string) func() (string, error) {
	return func() (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		token := strings.TrimSpace(string(b))
		if token == "" {
			return "", fmt.Errorf("%s is empty", path)
		}
		return token, nil
	}
}

// CAFromConfigMap returns a RootCAs function that reads the controller's CA bundle (key
// CAKey) from a ConfigMap through kube-apiserver, which the agent already trusts.
func CAFromConfigMap(client kubernetes.Interface, namespace, name string) func(context.Context) (*x509.CertPool, error) {
	return func(ctx context.Context) (*x509.CertPool, error) {
		cm, err := client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("ConfigMap %s/%s: %w", namespace, name, err)
		}
		return PoolFromPEM(cm.Data[CAKey], namespace+"/"+name)
	}
}

// PoolFromPEM parses a PEM bundle of CA certificates; from names its origin in errors.
func PoolFromPEM(bundle, from string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(bundle)) {
		return nil, fmt.Errorf("%s holds no PEM certificate under %q", from, CAKey)
	}
	return pool, nil
}
