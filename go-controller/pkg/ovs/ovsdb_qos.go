package ovs

import (
	"context"
	"fmt"
	"strconv"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// A port's transmit limit is a QoS row of type linux-htb with other_config:max-rate,
// which ovs-vswitchd turns into an htb qdisc on the port's kernel device. It shapes what
// OVS sends out of the port on either datapath: the userspace datapath sends through a
// packet socket, whose packets pass the device's qdisc, as the kernel datapath's do.
const (
	qosTypeHTB = "linux-htb"
	qosMaxRate = "max-rate"
	qosPort    = "kovs.io/qos-port" // external_ids: the port a kovs QoS row was made for
	qosOwner   = "kovs"             // external_ids kovs.io/owner of kovs's QoS rows
	namedQoS   = "kovs_qos"
)

// SetPortTransmitRate limits what the port transmits (for a pod's port: the traffic to
// the pod) to bitsPerSecond, or removes the limit for 0, and returns once ovs-vswitchd
// has applied it. A port already so limited costs no transaction.
func (c *OVSDB) SetPortTransmitRate(ctx context.Context, port string, bitsPerSecond uint64) error {
	what := fmt.Sprintf("set the transmit rate of port %s to %d bit/s", port, bitsPerSecond)
	return c.retryOnConflict(ctx, func() error {
		ops, err := c.transmitRateOps(ctx, port, bitsPerSecond)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if len(ops) == 0 {
			return nil
		}
		return c.transactAndWaitVswitchd(ctx, what, ops)
	})
}

// PortTransmitRate is the port's transmit limit in bit/s (0: none), from its QoS row.
func (c *OVSDB) PortTransmitRate(ctx context.Context, port string) (uint64, error) {
	p, err := c.port(ctx, port)
	if err != nil {
		return 0, err
	}
	q, ok, err := c.qosOf(ctx, p)
	if err != nil || !ok {
		return 0, err
	}
	r, _ := strconv.ParseUint(q.OtherConfig[qosMaxRate], 10, 64)
	return r, nil
}

func (c *OVSDB) transmitRateOps(ctx context.Context, port string, rate uint64) ([]ovsdb.Operation, error) {
	p, err := c.port(ctx, port)
	if err != nil {
		return nil, err
	}
	current, has, err := c.qosOf(ctx, p)
	if err != nil {
		return nil, err
	}
	want := map[string]string{qosMaxRate: strconv.FormatUint(rate, 10)}
	switch {
	case rate == 0 && !has:
		return nil, nil
	case rate == 0:
		return c.clearQoSOps(p)
	case has && current.Type == qosTypeHTB && current.OtherConfig[qosMaxRate] == want[qosMaxRate]:
		return nil, nil
	case has:
		q := &qosRow{UUID: current.UUID, Type: qosTypeHTB, OtherConfig: want}
		return c.client.Where(q).Update(q, &q.Type, &q.OtherConfig)
	}
	q := &qosRow{UUID: namedQoS, Type: qosTypeHTB, OtherConfig: want,
		ExternalIDs: map[string]string{qosPort: port, flowTableOwner: qosOwner}}
	ops, err := c.client.Create(q)
	if err != nil {
		return nil, err
	}
	row := &portRow{UUID: p.UUID, QoS: ptr(namedQoS)}
	link, err := c.client.Where(row).Update(row, &row.QoS)
	if err != nil {
		return nil, err
	}
	return append(ops, link...), nil
}

// clearQoSOps unlinks the port's QoS row and deletes it (QoS is a root table: unlinked,
// it would stay).
func (c *OVSDB) clearQoSOps(p portRow) ([]ovsdb.Operation, error) {
	if deref(p.QoS) == "" {
		return nil, nil
	}
	row := &portRow{UUID: p.UUID}
	ops, err := c.client.Where(row).Update(row, &row.QoS)
	if err != nil {
		return nil, err
	}
	del, err := c.client.Where(&qosRow{UUID: *p.QoS}).Delete()
	if err != nil {
		return nil, err
	}
	return append(ops, del...), nil
}

// qosOf returns the port's QoS row, if it has one.
func (c *OVSDB) qosOf(ctx context.Context, p portRow) (qosRow, bool, error) {
	uuid := deref(p.QoS)
	if uuid == "" {
		return qosRow{}, false, nil
	}
	q := qosRow{UUID: uuid}
	if err := c.client.Get(ctx, &q); err != nil {
		return qosRow{}, false, fmt.Errorf("look up QoS %s of port %s: %w", uuid, p.Name, err)
	}
	return q, true, nil
}

// PruneQoS deletes the QoS rows kovs made that no port refers to any more (their port
// was deleted by something else than DeletePort), and returns how many.
func (c *OVSDB) PruneQoS(ctx context.Context) (int, error) {
	var ports []portRow
	if err := c.client.List(ctx, &ports); err != nil {
		return 0, fmt.Errorf("list ports: %w", err)
	}
	used := map[string]bool{}
	for _, p := range ports {
		used[deref(p.QoS)] = true
	}
	var rows []qosRow
	if err := c.client.WhereCache(func(q *qosRow) bool {
		return q.ExternalIDs[flowTableOwner] == qosOwner && !used[q.UUID]
	}).List(ctx, &rows); err != nil {
		return 0, fmt.Errorf("list QoS rows: %w", err)
	}
	var ops []ovsdb.Operation
	for _, q := range rows {
		del, err := c.client.Where(&qosRow{UUID: q.UUID}).Delete()
		if err != nil {
			return 0, err
		}
		ops = append(ops, del...)
	}
	if len(ops) == 0 {
		return 0, nil
	}
	if _, err := c.transact(ctx, "delete unused QoS rows", ops); err != nil {
		return 0, err
	}
	return len(rows), nil
}
