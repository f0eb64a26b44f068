package ovs

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
)

// Ports lists the ports of a bridge (its own internal port included), sorted
// by name, from the cache. A missing bridge is an error matching ErrNotFound.
func (c *OVSDB) Ports(ctx context.Context, bridge string) ([]PortInfo, error) {
	br, err := c.bridge(ctx, bridge)
	if err != nil {
		return nil, fmt.Errorf("list ports: %w", err)
	}
	ports := make([]PortInfo, 0, len(br.Ports))
	for _, uuid := range br.Ports {
		info, err := c.portInfo(ctx, uuid)
		if err != nil {
			return nil, fmt.Errorf("list ports of bridge %s: %w", bridge, err)
		}
		ports = append(ports, info)
	}
	slices.SortFunc(ports, func(a, b PortInfo) int { return cmp.Compare(a.Name, b.Name) })
	return ports, nil
}

// FindPorts lists the ports of a bridge whose interface external_ids map key
// to value, e.g. FindPorts(ctx, "br-int", "iface-id", "default_web-0").
func (c *OVSDB) FindPorts(ctx context.Context, bridge, key, value string) ([]PortInfo, error) {
	ports, err := c.Ports(ctx, bridge)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(ports, func(p PortInfo) bool {
		return !hasExternalID(p.ExternalIDs, key, value)
	}), nil
}

// portInfo reads a port and its first interface from the cache. It copies
// every map: libovsdb hands out the cache's own maps.
func (c *OVSDB) portInfo(ctx context.Context, portUUID string) (PortInfo, error) {
	p := portRow{UUID: portUUID}
	if err := c.client.Get(ctx, &p); err != nil {
		return PortInfo{}, fmt.Errorf("look up port %s: %w", portUUID, err)
	}
	info := PortInfo{Name: p.Name, ExternalIDs: maps.Clone(p.ExternalIDs)}
	if len(p.Interfaces) == 0 {
		return info, nil
	}
	iface, err := c.iface(ctx, p.Interfaces[0])
	if err != nil {
		return PortInfo{}, err
	}
	info.Type = iface.Type
	info.Ofport = deref(iface.Ofport)
	info.MAC = cmp.Or(deref(iface.MACInUse), deref(iface.MAC))
	info.Error = deref(iface.Error)
	if len(iface.ExternalIDs) > 0 {
		info.ExternalIDs = maps.Clone(iface.ExternalIDs)
	}
	return info, nil
}
