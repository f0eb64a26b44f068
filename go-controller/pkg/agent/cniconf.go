package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// CNIConfFile is the name of the node's CNI config, in the directory kubelet (or the
// container runtime) reads.
const CNIConfFile = "10-kovs.conflist"

// CNI spec versions of the conflist. kovs-cni speaks 1.1.0 (GC, STATUS); runtimes whose
// libcni predates CNI 1.1 (containerd 1.6 and 1.7) refuse a "1.1.0" result ("unsupported
// CNI result version") and read only cniVersion, so that stays 1.0.0, while cniVersions
// (CNI 1.1) lets newer runtimes pick 1.1.0.
const (
	cniConfVersion    = "1.0.0"
	cniConfNewVersion = "1.1.0"
)

// writeCNIConf writes the conflist atomically (runtimes poll the directory and must never
// read half a file). hostPortBackend is portmap's backend, or HostPortBackendAuto to let
// portmap probe for iptables on every call.
//
// The conflist has one plugin, kovs-cni, with the capability portMappings: kovs-cni runs
// the reference portmap itself, for the pods that have a hostPort, rather than the
// conflist chaining it, which would make the runtime exec portmap on every pod's ADD and
// DEL (about 4 ms of each pod's start) for it to do nothing without portMappings.
func writeCNIConf(dir, socket, hostPortBackend string) error {
	kovsCNI := map[string]any{"type": "kovs-cni", "socket": socket, "capabilities": map[string]bool{"portMappings": true}}
	if hostPortBackend != HostPortBackendAuto {
		// Named, portmap skips its probe (an "iptables --version" and an "iptables -S"
		// on every hostPort pod's ADD and DEL, docs/configuration.md).
		kovsCNI["portmap"] = map[string]string{"backend": hostPortBackend}
	}
	conf := map[string]any{
		"cniVersion":  cniConfVersion,
		"cniVersions": []string{cniConfVersion, cniConfNewVersion},
		"name":        "kovs",
		"plugins":     []any{kovsCNI},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("CNI config dir: %w", err)
	}
	tmp := filepath.Join(dir, "."+CNIConfFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, CNIConfFile))
}

// removeCNIConf removes the conflist: the node stops accepting pods while kovs is not
// ready. Missing is fine.
func removeCNIConf(dir string) error {
	err := os.Remove(filepath.Join(dir, CNIConfFile))
	if os.IsNotExist(err) {
		return nil
	}
	return err
}
