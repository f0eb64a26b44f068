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
