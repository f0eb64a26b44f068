package ovsfake

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

// DeletePort implements PortStore.
func (f *OVSDB) DeletePort(ctx context.Context, bridge, name string) error {
	what := fmt.Sprintf("delete port %s from bridge %s", name, bridge)
	if name == bridge {
		return fmt.Errorf("%s: it is the bridge's own port; delete the bridge instead", what)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(ctx); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if b, ok := f.bridges[bridge]; ok {
		delete(b.ports, name)
		delete(b.specs, name)
	}
	return nil
}

// Ports implements PortStore.
func (f *OVSDB) Ports(ctx context.Context, bridge string) ([]ovs.PortInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(ctx); err != nil {
		return nil, fmt.Errorf("list ports: %w", err)
	}
	b, ok := f.bridges[bridge]
	if !ok {
		return nil, fmt.Errorf("list ports: bridge %s: %w", bridge, ovs.ErrNotFound)
	}
	ports := make([]ovs.PortInfo, 0, len(b.ports))
	for _, p := range b.ports {
		info := *p
		info.ExternalIDs = maps.Clone(p.ExternalIDs)
		ports = append(ports, info)
	}
	slices.SortFunc(ports, func(a, b ovs.PortInfo) int { return cmp.Compare(a.Name, b.Name) })
	return ports, nil
}

// FindPorts implements PortStore.
func (f *OVSDB) FindPorts(ctx context.Context, bridge, key, value string) ([]ovs.PortInfo, error) {
	ports, err := f.Ports(ctx, bridge)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(ports, func(p ovs.PortInfo) bool {
		v, ok := p.ExternalIDs[key]
		return !ok || v != value
	}), nil
}

// SetOtherConfig implements SwitchConfig.
func (f *OVSDB) SetOtherConfig(ctx context.Context, config map[string]string) error {
	return f.updateRoot(ctx, "set Open_vSwitch other_config", func() {
		f.otherConfig = mergeKeys(f.otherConfig, config)
	})
}

// RemoveOtherConfig implements SwitchConfig.
func (f *OVSDB) RemoveOtherConfig(ctx context.Context, keys ...string) error {
	return f.updateRoot(ctx, "remove Open_vSwitch other_config", func() {
		for _, k := range keys {
			delete(f.otherConfig, k)
		}
	})
}

// SetExternalIDs implements SwitchConfig.
func (f *OVSDB) SetExternalIDs(ctx context.Context, ids map[string]string) error {
	return f.updateRoot(ctx, "set Open_vSwitch external_ids", func() {
		f.externalIDs = mergeKeys(f.externalIDs, ids)
	})
}

// OtherConfig implements SwitchConfig.
func (f *OVSDB) OtherConfig(ctx context.Context) (map[string]string, error) {
	var out map[string]string
	err := f.updateRoot(ctx, "read Open_vSwitch other_config", func() {
		out = maps.Clone(f.otherConfig)
	})
	return out, err
}

// DatapathTypes implements SwitchConfig.
func (f *OVSDB) DatapathTypes(ctx context.Context) ([]string, error) {
	var out []string
	err := f.updateRoot(ctx, "read Open_vSwitch datapath_types", func() {
		out = slices.Clone(f.datapathTypes)
	})
	return out, err
}

// Close makes every later call fail, as a closed client does.
func (f *OVSDB) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
}

// updateRoot runs do under the lock if the fake is usable.
func (f *OVSDB) updateRoot(ctx context.Context, what string, do func()) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(ctx); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	do()
	return nil
}
