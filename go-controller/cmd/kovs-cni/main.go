// Command kovs-cni is kovs's CNI plugin (spec 1.1.0): a thin client of kovs-agent that
// creates each pod's veth and asks the agent to plug it into br-int.
package main

import (
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/utils/buildversion"

	"github.com/kovs-net/kovs/go-controller/pkg/cni/plugin"
)

func main() {
	skel.PluginMainFuncs(plugin.New(os.Stdout, os.Stderr).Funcs(), version.All, buildversion.BuildString("kovs-cni"))
}
