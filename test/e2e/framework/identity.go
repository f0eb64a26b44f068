package framework

import (
	"syscall"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Identities the tests act as (impersonated by the sandbox's admin, who may).
const (
	// ControllerUser is kovs-controller's ServiceAccount: the only writer of kovs's
	// annotations that dist/'s admission policies allow.
	ControllerUser = "system:serviceaccount:kube-system:kovs-controller"
)

// ClientAs returns a client of the sandbox's kube-apiserver that acts as user with
// groups (and system:authenticated), as admission and authorization see it.
func (s *Sandbox) ClientAs(t testing.TB, user string, groups ...string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Layout.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(groups, "system:authenticated")}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// ServiceAccountClient is ClientAs the ServiceAccount namespace/name, with the groups
// kube-apiserver gives ServiceAccounts.
func (s *Sandbox) ServiceAccountClient(t testing.TB, namespace, name string) kubernetes.Interface {
	return s.ClientAs(t, "system:serviceaccount:"+namespace+":"+name,
		"system:serviceaccounts", "system:serviceaccounts:"+namespace)
}

// TokenClient returns a client that authenticates with token only.
func (s *Sandbox) TokenClient(t testing.TB, token string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Layout.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	anon := rest.AnonymousClientConfig(cfg)
	anon.BearerToken = token
	client, err := kubernetes.NewForConfig(anon)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// Pause stops the sandbox process name (SIGSTOP) and returns its resume (SIGCONT), which
// may be called more than once; the test's cleanup resumes it in any case.
func (s *Sandbox) Pause(t testing.TB, name string) (resume func()) {
	t.Helper()
	pid := s.Layout.PID(name)
	if pid == 0 {
		t.Fatalf("sandbox process %s is not running", name)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("stop %s (pid %d): %v", name, pid, err)
	}
	resumed := false
	resume = func() {
		if !resumed {
			resumed = true
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("resume %s (pid %d): %v", name, pid, err)
			}
		}
	}
	t.Cleanup(resume)
	return resume
}
