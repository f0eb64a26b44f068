// Command genbase writes the manifests the network-policy-api conformance suite runs with
// on kovs into a directory (suite/base, by go generate, before the suite is built): the
// module's conformance/base as the module embeds it, at the version go.mod names, and
// manifests-without-sctp.yaml, its base manifests without the SCTP servers (package
// strip). They are generated at build time and never kept in the repository, so they
// cannot drift from the module.
//
//	go run ./genbase DIR
package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"sigs.k8s.io/network-policy-api/conformance"

	"github.com/kovs-net/kovs/test/e2e/conformance/netpolapi/strip"
)

// WithoutSCTP is the file genbase adds beside the module's base manifests.
const WithoutSCTP = "manifests-without-sctp.yaml"

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: genbase DIR (the directory to write the suite's base/ into)")
		os.Exit(2)
	}
	if err := write(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "genbase:", err)
		os.Exit(1)
	}
}

func write(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	base, err := fs.Sub(conformance.Manifests, "base")
	if err != nil {
		return err
	}
	if err := os.CopyFS(dir, base); err != nil {
		return err
	}
	in, err := fs.ReadFile(base, "manifests.yaml")
	if err != nil {
		return err
	}
	out, removed, err := strip.WithoutSCTP(in)
	if err != nil {
		return err
	}
	fmt.Printf("genbase: %s: the module's conformance/base, and %s without its %d SCTP porter containers\n", dir, WithoutSCTP, removed)
	return os.WriteFile(filepath.Join(dir, WithoutSCTP), out, 0o644)
}
