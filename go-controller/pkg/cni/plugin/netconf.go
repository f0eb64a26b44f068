package plugin

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
)

// DefaultSocket is where kovs-agent serves kovs-cni unless the network config says
// otherwise.
const DefaultSocket = "/var/run/kovs/cni.sock"

// NetConf is kovs-cni's network config: the standard fields, and
//
//	"socket":  the agent's unix socket (default /var/run/kovs/cni.sock)
//	"logFile": where to log each command (optional; without it only warnings go to
//	           stderr, which the runtime logs)
//	"portmap": options of the portmap plugin kovs-cni runs for a pod's hostPorts
//	           (optional; "backend", "snat", ...: portmap's own keys)
//
// and, with the capability portMappings declared, the runtime's runtimeConfig.portMappings.
type NetConf struct {
	types.NetConf

	Socket  string                     `json:"socket,omitempty"`
	LogFile string                     `json:"logFile,omitempty"`
	Portmap map[string]json.RawMessage `json:"portmap,omitempty"`

	RuntimeConfig struct {
		// PortMappings are the pod's hostPorts, passed on to portmap as they are.
		PortMappings []json.RawMessage `json:"portMappings,omitempty"`
	} `json:"runtimeConfig"`
}

// parseNetConf decodes and checks the network config the runtime passed on stdin.
func parseNetConf(stdin []byte) (*NetConf, error) {
	conf := &NetConf{}
	if err := json.Unmarshal(stdin, conf); err != nil {
		return nil, withCode(types.ErrDecodingFailure, fmt.Errorf("parse the kovs network config: %w", err))
	}
	if conf.Socket == "" {
		conf.Socket = DefaultSocket
	}
	if !filepath.IsAbs(conf.Socket) {
		return nil, withCode(types.ErrInvalidNetworkConfig,
			fmt.Errorf("network config %q: socket %q is not an absolute path", conf.Name, conf.Socket))
	}
	if conf.LogFile != "" && !filepath.IsAbs(conf.LogFile) {
		return nil, withCode(types.ErrInvalidNetworkConfig,
			fmt.Errorf("network config %q: logFile %q is not an absolute path", conf.Name, conf.LogFile))
	}
	for _, k := range portmapOwnKeys {
		if _, ok := conf.Portmap[k]; ok {
			return nil, withCode(types.ErrInvalidNetworkConfig,
				fmt.Errorf("network config %q: portmap option %q is kovs-cni's to set: remove it", conf.Name, k))
		}
	}
	return conf, nil
}

// podArgs are the CNI_ARGS keys Kubernetes runtimes pass (with IgnoreUnknown=1).
type podArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE types.UnmarshallableString //nolint:revive // the key's name
	K8S_POD_NAME      types.UnmarshallableString //nolint:revive
	K8S_POD_UID       types.UnmarshallableString //nolint:revive
}

// parsePod reads the pod's identity from CNI_ARGS. With required, a missing key is an
// error naming it (ADD and CHECK need the pod); without, missing keys leave fields empty
// (DEL works from the container ID alone).
func parsePod(cniArgs string, required bool) (cni.PodRef, error) {
	var args podArgs
	if err := types.LoadArgs(cniArgs, &args); err != nil {
		return cni.PodRef{}, withCode(types.ErrInvalidEnvironmentVariables, fmt.Errorf("parse CNI_ARGS: %w", err))
	}
	pod := cni.PodRef{
		Namespace: string(args.K8S_POD_NAMESPACE),
		Name:      string(args.K8S_POD_NAME),
		UID:       string(args.K8S_POD_UID),
	}
	if !required {
		return pod, nil
	}
	var missing []string
	for _, kv := range [][2]string{
		{"K8S_POD_NAMESPACE", pod.Namespace}, {"K8S_POD_NAME", pod.Name}, {"K8S_POD_UID", pod.UID},
	} {
		if kv[1] == "" {
			missing = append(missing, kv[0])
		}
	}
	if len(missing) > 0 {
		return cni.PodRef{}, withCode(types.ErrInvalidEnvironmentVariables, fmt.Errorf(
			"CNI_ARGS lacks %s: kovs-cni serves Kubernetes pods and needs the runtime to pass "+
				"K8S_POD_NAMESPACE, K8S_POD_NAME and K8S_POD_UID", strings.Join(missing, ", ")))
	}
	return pod, nil
}
