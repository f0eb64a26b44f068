// Command kovs-cni is kovs's CNI plugin (spec 1.1.0): a thin client of kovs-agent that
// creates each pod's veth and asks the agent to plug it into br-int.
//
// Run as `kovs-cni install --to DIR [BINARY...]` (the DaemonSet's init container does), it
// installs itself (and the other binaries named) into a node's CNI bin directory,
// atomically, so a runtime executing the old binary is never disturbed.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/utils/buildversion"

	"github.com/kovs-net/kovs/go-controller/pkg/cni/install"
	"github.com/kovs-net/kovs/go-controller/pkg/cni/plugin"
)

func main() {
	// A runtime always sets CNI_COMMAND; "install" is the init container's.
	if len(os.Args) > 1 && os.Args[1] == "install" && os.Getenv("CNI_COMMAND") == "" {
		if err := installCmd(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "kovs-cni install:", err)
			os.Exit(1)
		}
		return
	}
	skel.PluginMainFuncs(plugin.New(os.Stdout, os.Stderr).Funcs(), version.All, buildversion.BuildString("kovs-cni"))
}

func installCmd(args []string) error {
	fs := flag.NewFlagSet("install", flag.ContinueOnError)
	to := fs.String("to", "/host/opt/cni/bin", "the node's CNI bin directory (mounted from the host)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	bins := fs.Args()
	if len(bins) == 0 {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		bins = []string{self}
	}
	if err := install.Binaries(*to, bins...); err != nil {
		return err
	}
	fmt.Printf("installed %v into %s\n", bins, *to)
	return nil
}
