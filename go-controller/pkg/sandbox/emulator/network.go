package emulator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
)

// The messages kubelet and the container runtime give while no CNI network is usable.
const (
	networkNotReadyReason = "NetworkPluginNotReady"
	noCNIConfigMessage    = "cni plugin not initialized"
)

// Runtime is the node's network plugin as a container runtime sees it: the first conflist
// in the CNI config directory, invoked through libcni from the node namespace with the
// node's CNI directories. The emulator runs every pod's network through one; a test that
// acts as the runtime for a pod itself (see RuntimeAnnotation) makes its own with the same
// directories, and so calls the plugin exactly as the emulator would.
type Runtime struct {
	confDir string
	cni     *libcni.CNIConfig

	mu   sync.Mutex
	list *libcni.NetworkConfigList
	err  error // why the network is not ready; nil when ready
}

// NewRuntime returns the runtime of a node whose CNI config, plugin binaries and result
// cache are in confDir, binDir and cacheDir, and whose network namespace (where the
// plugins run) is nodeNetNSPath. It is not ready until Ready succeeds.
func NewRuntime(confDir, binDir, cacheDir, nodeNetNSPath string) *Runtime {
	exec := &nodeNetNSExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, netnsPath: nodeNetNSPath}
	return &Runtime{
		confDir: confDir,
		cni:     libcni.NewCNIConfigWithCacheDir([]string{binDir}, cacheDir, exec),
		err:     errors.New(noCNIConfigMessage),
	}
}

// Ready reloads the network config and asks the plugin for its STATUS; nil means pods
// can be attached.
func (c *Runtime) Ready(ctx context.Context) error {
	c.refresh(ctx)
	_, err := c.ready()
	return err
}

// refresh reloads the config (the lexically first file, as containerd and CRI-O pick it)
// and asks the plugin for its STATUS (CNI 1.1). It returns whether readiness changed.
func (c *Runtime) refresh(ctx context.Context) bool {
	list, err := loadConfList(c.confDir)
	if err == nil {
		if serr := c.cni.GetStatusNetworkList(ctx, list); serr != nil {
			err = fmt.Errorf("network plugin %s is not ready: %w", list.Name, serr)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := (err == nil) != (c.err == nil)
	c.list, c.err = list, err
	return changed
}

// ready returns the config list to use, or the reason the network is not ready.
func (c *Runtime) ready() (*libcni.NetworkConfigList, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return nil, c.err
	}
	return c.list, nil
}

// notReadyMessage is kubelet's wording for a runtime whose network is not ready.
func notReadyMessage(err error) string {
	return fmt.Sprintf("container runtime network not ready: NetworkReady=false reason:%s message:Network plugin returns error: %v",
		networkNotReadyReason, err)
}

func loadConfList(dir string) (*libcni.NetworkConfigList, error) {
	files, err := libcni.ConfFiles(dir, []string{".conf", ".conflist", ".json"})
	if err != nil {
		return nil, fmt.Errorf("read CNI config dir %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, errors.New(noCNIConfigMessage)
	}
	first := files[0]
	if filepath.Ext(first) == ".conflist" {
		return libcni.ConfListFromFile(first)
	}
	conf, err := libcni.ConfFromFile(first)
	if err != nil {
		return nil, err
	}
	return libcni.ConfListFromConf(conf)
}

// Attachment identifies one pod's network attachment, as a runtime passes it to CNI.
type Attachment struct {
	ContainerID string
	NetNSPath   string
	Namespace   string
	Name        string
	UID         string
	// PortMappings are the pod's hostPorts, passed as runtimeConfig.portMappings.
	PortMappings []PortMapping
}

// PortMapping is one entry of the portMappings capability argument exactly as
// containerd's CRI plugin sends it: go-cni's PortMapping, which has no JSON tags, so the
// JSON carries the Go field names (HostPort, ContainerPort, Protocol, HostIP); the
// protocol is lower case and HostIP empty unless the pod asks for one.
type PortMapping struct {
	HostPort      int32
	ContainerPort int32
	Protocol      string
	HostIP        string
}

// PodPortMappings are a pod's port mappings as kubelet and containerd derive them: every
// container port with a hostPort (kubelet lists each container port once, containerd
// drops those without a hostPort), in the order of the pod's containers and ports.
func PodPortMappings(pod *corev1.Pod) []PortMapping {
	var out []PortMapping
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.HostPort <= 0 {
				continue
			}
			proto := p.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			m := PortMapping{HostPort: p.HostPort, ContainerPort: p.ContainerPort, Protocol: strings.ToLower(string(proto)), HostIP: p.HostIP}
			if !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	return out
}

const podInterface = "eth0"

func (a Attachment) runtimeConf() *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		// containerd passes the capability on every call, empty when there is no hostPort.
		CapabilityArgs: map[string]interface{}{"portMappings": a.PortMappings},
		ContainerID:    a.ContainerID,
		NetNS:          a.NetNSPath,
		IfName:         podInterface,
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", a.Namespace},
			{"K8S_POD_NAME", a.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", a.ContainerID},
			{"K8S_POD_UID", a.UID},
		},
	}
}

// Add calls CNI ADD for a with the network config Ready last loaded.
func (c *Runtime) Add(ctx context.Context, a Attachment) (types.Result, error) {
	list, err := c.ready()
	if err != nil {
		return nil, err
	}
	return c.cni.AddNetworkList(ctx, list, a.runtimeConf())
}

// Del calls CNI DEL for a with the network config Ready last loaded.
func (c *Runtime) Del(ctx context.Context, a Attachment) error {
	list, err := c.ready()
	if err != nil {
		return err
	}
	return c.cni.DelNetworkList(ctx, list, a.runtimeConf())
}

// gc asks the plugin to remove every attachment but the valid ones (CNI 1.1 GC).
func (c *Runtime) gc(ctx context.Context, valid []Attachment) error {
	list, err := c.ready()
	if err != nil {
		return nil
	}
	args := &libcni.GCArgs{}
	for _, a := range valid {
		args.ValidAttachments = append(args.ValidAttachments, types.GCAttachment{ContainerID: a.ContainerID, IfName: podInterface})
	}
	return c.cni.GCNetworkList(ctx, list, args)
}

// nodeNetNSExec runs CNI plugins inside the node namespace, where a container runtime
// runs them: the plugin process is forked from an OS thread switched into that namespace.
type nodeNetNSExec struct {
	*invoke.RawExec
	version.PluginDecoder
	netnsPath string
}

func (e *nodeNetNSExec) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	var out []byte
	err := ns.WithNetNSPath(e.netnsPath, func(ns.NetNS) error {
		var err error
		out, err = e.RawExec.ExecPlugin(ctx, pluginPath, stdin, environ)
		return err
	})
	return out, err
}
