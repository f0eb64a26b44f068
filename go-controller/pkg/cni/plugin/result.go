package plugin

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"
)

// Indexes of the result's interfaces.
const (
	hostInterfaceIndex = 0
	podInterfaceIndex  = 1
)

// newResult describes the attachment: the host end (in the node's namespace) and the pod
// end (Sandbox: the pod's netns path), the pod's addresses on the pod end, and its routes.
func newResult(host netlink.Link, spec *podInterfaceSpec, netnsPath string) *types100.Result {
	podIndex := podInterfaceIndex
	result := &types100.Result{
		CNIVersion: types100.ImplementedSpecVersion,
		Interfaces: []*types100.Interface{
			hostInterfaceIndex: {Name: host.Attrs().Name, Mac: host.Attrs().HardwareAddr.String(), Mtu: spec.mtu},
			podInterfaceIndex:  {Name: spec.name, Mac: spec.mac.String(), Mtu: spec.mtu, Sandbox: netnsPath},
		},
	}
	for _, a := range spec.addrs {
		result.IPs = append(result.IPs, &types100.IPConfig{Interface: &podIndex, Address: *a.ipnet, Gateway: a.gateway})
	}
	for _, r := range spec.routes {
		result.Routes = append(result.Routes, &types.Route{Dst: *r.dst, GW: r.gw})
	}
	return result
}

// printResult writes result in the config's CNI version (no version means 0.1.0, as
// for the runtime).
func printResult(w io.Writer, result *types100.Result, cniVersion string) error {
	b, err := encodeResult(result, cniVersion)
	if err != nil {
		return err
	}
	return writeResult(w, b)
}

// encodeResult is result in the config's CNI version, as JSON.
func encodeResult(result *types100.Result, cniVersion string) ([]byte, error) {
	if cniVersion == "" {
		cniVersion = "0.1.0"
	}
	converted, err := result.GetAsVersion(cniVersion)
	if err != nil {
		return nil, fmt.Errorf("convert the result to CNI %s: %w", cniVersion, err)
	}
	b, err := json.MarshalIndent(converted, "", "    ")
	if err != nil {
		return nil, fmt.Errorf("encode the result: %w", err)
	}
	return b, nil
}

// writeResult writes an encoded result.
func writeResult(w io.Writer, b []byte) error {
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write the result: %w", err)
	}
	return nil
}
