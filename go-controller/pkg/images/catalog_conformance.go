package images

// CoreDNSVersion is the CoreDNS kubeadm v1.37 deploys; hack/build-k8s.sh builds it
// (COREDNS_VERSION) into the cached Kubernetes build.
const CoreDNSVersion = "v1.14.6"

// corednsSpec is the cluster DNS of the sandbox's real nodes, as kubeadm names its image:
// the static binary alone, as upstream's (distroless) image has it.
func corednsSpec() Spec {
	return Spec{
		Short:        "coredns",
		Names:        []string{"registry.k8s.io/coredns/coredns:" + CoreDNSVersion},
		About:        "CoreDNS, the cluster DNS of the sandbox's real nodes (the upstream suites need one)",
		Files:        []File{{Src: Source{Kind: K8sBinary, Name: "coredns"}, Dest: "/coredns", Mode: 0o755}},
		User:         "65532:65532",
		Env:          []string{DefaultPath},
		Entrypoint:   []string{"/coredns"},
		ExposedPorts: []string{"53/tcp", "53/udp"},
	}
}

// glibcDNSTestingSpec is test/images/glibc-dns-testing of k8s.io/kubernetes: Debian with
// dnsutils (the DNS conformance tests resolve with a glibc dig from it) and CoreDNS at
// /coredns, which upstream downloads.
func glibcDNSTestingSpec() Spec {
	return Spec{
		Short:      "glibc-dns-testing",
		Names:      []string{"registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1"},
		About:      "the DNS conformance tests' glibc resolver image (dig from dnsutils)",
		Base:       &Base{Suite: debianSuite, DockerImage: debianDocker, Packages: []string{"dnsutils"}},
		Files:      []File{{Src: Source{Kind: K8sBinary, Name: "coredns"}, Dest: "/coredns", Mode: 0o755}},
		Env:        []string{DefaultPath},
		Entrypoint: []string{"/bin/sh"},
	}
}

// regressionIssue74839Spec is test/images/regression-issue-74839 of k8s.io/kubernetes (the
// server of "Conntrack proxy implementation should not be vulnerable to the invalid
// conntrack state bug": it answers each connection's handshake with an out-of-window
// packet). Upstream puts it on debian-base; the binary is static and runs nothing else,
// so the image holds it alone.
func regressionIssue74839Spec() Spec {
	return Spec{
		Short:      "regression-issue-74839",
		Names:      []string{"registry.k8s.io/e2e-test-images/regression-issue-74839:1.5"},
		About:      "the invalid-conntrack-state test's server (test/images/regression-issue-74839)",
		Files:      []File{{Src: Source{Kind: K8sBinary, Name: "regression-issue-74839"}, Dest: "/regression-issue-74839", Mode: 0o755}},
		Env:        []string{DefaultPath},
		Entrypoint: []string{"/regression-issue-74839"},
		Checks: []Check{{
			Src:  Source{Kind: K8sSource, Name: "test/images/regression-issue-74839/VERSION"},
			Want: "1.5",
			Why:  "the image name's tag (regressionIssue74839Spec in go-controller/pkg/images/catalog_conformance.go)",
		}},
	}
}

// busyboxApplets are the BusyBox applets the busybox image links into /usr/local/bin
// (ahead of Debian's own commands on PATH), as upstream's image has every applet in /bin:
// those the sig-network suites call.
var busyboxApplets = []string{"nc", "nslookup", "ping", "telnet", "wget"}

// busyboxSpec stands for registry.k8s.io/e2e-test-images/busybox (BusyBox alone):
// Debian with its busybox package, the applets the suites call linked to it, and Debian's
// shell and coreutils for the rest ("sh -c 'while true; do sleep 2; nc boom-server 9000&
// done'" in the conntrack tests).
func busyboxSpec() Spec {
	s := Spec{
		Short: "busybox",
		Names: []string{"registry.k8s.io/e2e-test-images/busybox:1.37.0-2", "registry.k8s.io/e2e-test-images/busybox:1.36.1-1"},
		About: "the e2e suites' busybox image (Debian's busybox, its network applets linked)",
		Base:  &Base{Suite: debianSuite, DockerImage: debianDocker, Packages: []string{"busybox"}},
		Env:   []string{DefaultPath},
		Cmd:   []string{"sh"},
	}
	for _, a := range busyboxApplets {
		s.Symlinks = append(s.Symlinks, Symlink{Path: "/usr/local/bin/" + a, Target: "/usr/bin/busybox"})
	}
	return s
}
