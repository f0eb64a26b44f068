package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
)

// portmapType is the plugin kovs-cni runs for a pod's hostPorts: the reference portmap of
// containernetworking/plugins, which kovs-agent's init container installs next to
// kovs-cni.
const portmapType = "portmap"

// errPortmapMissing: the pod has hostPorts and CNI_PATH has no portmap.
var errPortmapMissing = errors.New("no portmap plugin in CNI_PATH")

// portmapTimeout bounds one portmap run (it may wait for the xtables lock).
const portmapTimeout = 60 * time.Second

// Keys of a portmap config that kovs-cni fills in itself; the "portmap" options of the
// network config must not set them.
var portmapOwnKeys = []string{"cniVersion", "name", "type", "capabilities", "runtimeConfig", "prevResult"}

// runPortmap runs portmap for command (ADD, DEL or CHECK) when the runtime passed the
// pod's hostPorts (runtimeConfig.portMappings), as a delegated plugin: found in CNI_PATH,
// given the network config's name and version, the "portmap" options and prevResult (the
// pod's result; nil leaves it out). A pod without a hostPort runs nothing, which is why
// kovs-cni runs portmap rather than the conflist chaining it: portmap itself does nothing
// without portMappings, but the runtime would exec it for every pod, on every ADD and DEL.
//
// The network name is kept, so portmap's chains and tables are named as they were when
// the conflist chained it: an upgrade removes the hostPorts of pods set up before it.
func (inv *invocation) runPortmap(command string, prevResult []byte) error {
	if !inv.hasHostPorts() {
		return nil
	}
	path, err := invoke.FindInPath(portmapType, filepath.SplitList(inv.args.Path))
	if err != nil {
		return fmt.Errorf("the pod has hostPorts, which kovs-cni maps with the portmap plugin: %w "+
			"(CNI_PATH %q; kovs-agent's init container installs portmap next to kovs-cni)", errPortmapMissing, inv.args.Path)
	}
	conf, err := portmapConf(inv.conf, prevResult)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), portmapTimeout)
	defer cancel()
	args := &invoke.Args{Command: command, ContainerID: inv.args.ContainerID, NetNS: inv.args.Netns,
		PluginArgsStr: inv.args.Args, IfName: inv.args.IfName, Path: inv.args.Path}
	exec := &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: inv.stderr}}
	start := time.Now()
	if command == "ADD" {
		// portmap prints prevResult back; kovs-cni prints its own, the same.
		_, err = invoke.ExecPluginWithResult(ctx, path, conf, args, exec)
	} else {
		err = invoke.ExecPluginWithoutResult(ctx, path, conf, args, exec)
	}
	inv.log = inv.log.WithField("portmap", time.Since(start).Round(time.Millisecond))
	if err != nil {
		return fmt.Errorf("portmap %s of the pod's %d hostPort mappings: %w", command, len(inv.conf.RuntimeConfig.PortMappings), err)
	}
	return nil
}

// unmapHostPorts runs portmap's DEL (DEL, and the undo of a failed ADD). Without portmap
// in CNI_PATH it warns and succeeds: nothing of portmap's can be removed without it (at
// ADD, nothing was made), and a failing DEL would keep the pod Terminating.
func (inv *invocation) unmapHostPorts(prevResult []byte) error {
	err := inv.runPortmap("DEL", prevResult)
	if errors.Is(err, errPortmapMissing) {
		inv.log.WithError(err).Warn("hostPorts not unmapped")
		return nil
	}
	return err
}

// hasHostPorts reports whether the runtime passed the pod's hostPorts: only then is there
// anything for portmap to do, or its prevResult to encode.
func (inv *invocation) hasHostPorts() bool { return len(inv.conf.RuntimeConfig.PortMappings) > 0 }

// portmapConf is portmap's network config: the "portmap" options, with the network's
// version and name, the runtime's portMappings and prevResult.
func portmapConf(conf *NetConf, prevResult []byte) ([]byte, error) {
	m := make(map[string]any, len(conf.Portmap)+len(portmapOwnKeys))
	for k, v := range conf.Portmap {
		m[k] = v
	}
	m["cniVersion"] = conf.CNIVersion
	m["name"] = conf.Name
	m["type"] = portmapType
	m["runtimeConfig"] = map[string]any{"portMappings": conf.RuntimeConfig.PortMappings}
	if prevResult != nil {
		m["prevResult"] = json.RawMessage(prevResult)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("portmap's network config: %w", err)
	}
	return b, nil
}

// rawPrevResult is the prevResult the runtime passed, as JSON, or nil.
func rawPrevResult(conf *NetConf) ([]byte, error) {
	if conf.RawPrevResult == nil {
		return nil, nil
	}
	b, err := json.Marshal(conf.RawPrevResult)
	if err != nil {
		return nil, fmt.Errorf("encode prevResult for portmap: %w", err)
	}
	return b, nil
}
