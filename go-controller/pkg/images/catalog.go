package images

import (
	"fmt"
	"strings"
)

// K8sVersion is the Kubernetes release whose cached build (hack/build-k8s.sh) and module
// source the test images come from.
const K8sVersion = "1.37.2"

// The bases and build image the specs and Dockerfiles name.
const (
	debianSuite  = "bookworm"
	debianDocker = "debian:12.13-slim"
	golangDocker = "golang:1.26.8-bookworm"
)

// Names of the test images. Add a name here and the archive carries it too.
func pauseNames() []string {
	return []string{
		"registry.k8s.io/pause:3.10.2",
		"registry.k8s.io/pause:3.10",
	}
}

func agnhostNames() []string {
	return []string{
		"registry.k8s.io/e2e-test-images/agnhost:2.66.1", // test/images/agnhost/VERSION
		"registry.k8s.io/e2e-test-images/agnhost:2.45",   // network-policy-api conformance
	}
}

// agnhostUser and agnhostGroup are what the upstream agnhost image defines for the e2e
// test of SupplementalGroups with a group defined in the image.
const (
	agnhostUser  = "user-defined-in-image"
	agnhostGroup = "group-defined-in-image"
)

// Catalog returns every image kovs builds, kovs's own first.
func Catalog() []Spec {
	return []Spec{controllerSpec(), agentSpec(), ovsSpec(), pauseSpec(), agnhostSpec(), corednsSpec(), glibcDNSTestingSpec(),
		regressionIssue74839Spec(), busyboxSpec()}
}

// Lookup returns the specs of the given short names (all of them for none), in
// catalog order, or an error naming what is unknown.
func Lookup(shorts ...string) ([]Spec, error) {
	all := Catalog()
	if len(shorts) == 0 {
		return all, nil
	}
	want := map[string]bool{}
	for _, s := range shorts {
		want[s] = true
	}
	var out []Spec
	for _, s := range all {
		if want[s.Short] {
			out = append(out, s)
			delete(want, s.Short)
		}
	}
	if len(want) > 0 {
		var known, unknown []string
		for _, s := range all {
			known = append(known, s.Short)
		}
		for s := range want {
			unknown = append(unknown, s)
		}
		return nil, fmt.Errorf("unknown image %s (known: %s)", strings.Join(unknown, ", "), strings.Join(known, ", "))
	}
	return out, nil
}

// portmapPackage is the reference CNI plugin for hostPort, at the version go.mod requires.
const portmapPackage = "github.com/containernetworking/plugins/plugins/meta/portmap"

func kovsBin(name, dest string) File {
	return File{Src: Source{Kind: KovsBinary, Name: name}, Dest: dest, Mode: 0o755}
}

func controllerSpec() Spec {
	return Spec{
		Short: "controller",
		Names: []string{"docker.io/kovs/controller:latest"},
		About: "kovs-controller: the static binary alone, running as non-root",
		Files: []File{kovsBin("kovs-controller", "/usr/local/bin/kovs-controller")},
		// 65532 is distroless's "nonroot"; the image has no /etc/passwd, so it is numeric.
		User:       "65532:65532",
		Env:        []string{DefaultPath},
		Entrypoint: []string{"/usr/local/bin/kovs-controller"},
		Dockerfile: "Dockerfile.controller",
	}
}

func agentSpec() Spec {
	return Spec{
		Short: "agent",
		Names: []string{"docker.io/kovs/agent:latest"},
		About: "kovs-agent, kovsctl and kovs-cni (copied to the host by the init container), with the tools they run",
		Base: &Base{
			Suite:       debianSuite,
			DockerImage: debianDocker,
			// openvswitch-common: ovs-ofctl and ovs-appctl (the agent and kovsctl run
			// them); nftables: nft, the host side of Services (docs/services.md);
			// iproute2 for an operator's `ip` in the container; ca-certificates.
			Packages: []string{"ca-certificates", "iproute2", "nftables", "openvswitch-common"},
		},
		Files: []File{
			kovsBin("kovs-agent", "/usr/local/bin/kovs-agent"),
			kovsBin("kovsctl", "/usr/local/bin/kovsctl"),
			kovsBin("kovs-cni", "/opt/kovs/bin/kovs-cni"),
			// Run by kovs-cni for a pod's hostPorts, installed onto the host with it;
			// the reference plugin, static.
			kovsBin(portmapPackage, "/opt/kovs/bin/portmap"),
		},
		Env:        []string{DefaultPath},
		Entrypoint: []string{"/usr/local/bin/kovs-agent"},
		Dockerfile: "Dockerfile.agent",
	}
}

func ovsSpec() Spec {
	return Spec{
		Short: "ovs",
		Names: []string{"docker.io/kovs/ovs:latest"},
		About: "ovsdb-server and ovs-vswitchd in the foreground under kovs-ovs, for nodes without host OVS",
		Base: &Base{
			Suite:       debianSuite,
			DockerImage: debianDocker,
			Packages:    []string{"iproute2", "openvswitch-switch"},
		},
		// The package's ovs-vswitchd replaced by the same version built with the patches in
		// hack/ovs (hack/build-ovs.sh): 3.1.0's userspace datapath can give a connection
		// another megaflow's verdict (docs/upgrades.md).
		Files: []File{kovsBin("kovs-ovs", "/usr/local/bin/kovs-ovs"),
			{Src: Source{Kind: OVSBinary, Name: "ovs-vswitchd"}, Dest: "/usr/sbin/ovs-vswitchd", Mode: 0o755}},
		Env:        []string{DefaultPath},
		Entrypoint: []string{"/usr/local/bin/kovs-ovs"},
		Dockerfile: "Dockerfile.ovs",
	}
}

// pauseSpec is build/pause of k8s.io/kubernetes: pause.c compiled static, alone, as
// upstream's Dockerfile has it (FROM scratch, USER 65535:65535).
func pauseSpec() Spec {
	return Spec{
		Short:      "pause",
		Names:      pauseNames(),
		About:      "the pod sandbox's pause process, built from build/pause/linux/pause.c",
		Files:      []File{{Src: Source{Kind: K8sBinary, Name: "pause"}, Dest: "/pause", Mode: 0o755}},
		User:       "65535:65535",
		Env:        []string{DefaultPath},
		Entrypoint: []string{"/pause"},
	}
}

// agnhostSpec is test/images/agnhost of k8s.io/kubernetes on Debian instead of Alpine,
// with the Debian packages of what upstream's Dockerfile installs (bind-tools ->
// dnsutils, util-linux-misc -> util-linux), plus what busybox gives Alpine and the suites
// call (ping, ps, wget). CoreDNS, which upstream's build downloads, is the cached build's
// (CoreDNSVersion). Left out: the fake registry's /var/registry (downloaded by upstream's
// build; only its own tests use it).
func agnhostSpec() Spec {
	const porter = "test/images/agnhost/porter/"
	return Spec{
		Short: "agnhost",
		Names: agnhostNames(),
		About: "the e2e suites' test server (agnhost), with a shell and network tools",
		Base: &Base{
			Suite:       debianSuite,
			DockerImage: debianDocker,
			Packages: []string{
				"bash", "curl", "dnsutils", "iperf", "iproute2", "iputils-ping", "netcat-openbsd",
				"procps", "socat", "util-linux", "wget",
			},
			Groups: []Group{{Name: agnhostGroup, GID: 50000, Members: []string{agnhostUser}}},
			Users:  []User{{Name: agnhostUser, UID: 1000, GID: 1000, Home: "/home/" + agnhostUser, Shell: "/bin/sh"}},
		},
		Files: []File{
			{Src: Source{Kind: K8sBinary, Name: "agnhost"}, Dest: "/agnhost", Mode: 0o755},
			// Upstream downloads CoreDNS into the image; the DNS tests run it as a
			// pod's own server ("should support configurable pod resolv.conf").
			{Src: Source{Kind: K8sBinary, Name: "coredns"}, Dest: "/coredns", Mode: 0o755},
			{Src: Source{Kind: K8sSource, Name: porter + "localhost.crt"}, Dest: "/localhost.crt", Mode: 0o644},
			{Src: Source{Kind: K8sSource, Name: porter + "localhost.key"}, Dest: "/localhost.key", Mode: 0o644},
		},
		Dirs: []Dir{{Path: "/uploads", Mode: 0o755}},
		Symlinks: []Symlink{
			{Path: "/agnhost-2", Target: "agnhost"}, // entrypoint-tester's other entrypoint
			{Path: "/usr/local/bin/iperf", Target: "/usr/bin/iperf"},
		},
		Env:          []string{DefaultPath},
		Entrypoint:   []string{"/agnhost"},
		Cmd:          []string{"pause"},
		ExposedPorts: []string{"80/tcp", "8080/tcp", "8081/tcp", "9376/tcp", "5000/tcp"},
		Checks: []Check{{
			Src:  Source{Kind: K8sSource, Name: "test/images/agnhost/VERSION"},
			Want: "2.66.1",
			Why:  "the first agnhost name's tag (agnhostNames in go-controller/pkg/images/catalog.go)",
		}},
	}
}
