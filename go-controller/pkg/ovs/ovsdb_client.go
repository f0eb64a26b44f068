package ovs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	"github.com/sirupsen/logrus"
)

// OVSDB is a client of the Open_vSwitch database. It keeps a cache of the
// Open_vSwitch, Bridge, Port and Interface tables, fed by a monitor, and
// reconnects (and re-monitors) by itself when the connection drops; calls made
// while it is disconnected wait for the reconnection, bounded by their context.
// A write whose connection drops under it (sent before the client noticed, or
// awaiting its reply) is run again once reconnected, from the fresh cache.
//
// Reads come from the cache; every write is one OVSDB transaction. It is safe
// for concurrent use.
type OVSDB struct {
	client   client.Client
	endpoint string
	log      *logrus.Entry
	poll     time.Duration
	// changes wakes waitFor when the cache changes.
	changes *cacheChanges
}

var _ Store = (*OVSDB)(nil)

// OVSDBOption configures NewOVSDB.
type OVSDBOption func(*ovsdbOptions)

type ovsdbOptions struct {
	log          *logrus.Entry
	poll         time.Duration
	maxReconnect time.Duration
}

// WithLogger sets the logger; libovsdb's own messages go to it at Debug level.
func WithLogger(log *logrus.Entry) OVSDBOption {
	return func(o *ovsdbOptions) {
		if log != nil {
			o.log = log
		}
	}
}

// WithPollInterval sets how often the client looks at its cache while it waits
// for ovs-vswitchd to apply a change, besides every time the cache changes: a
// bound for a cache update it was not told of (default 20ms).
func WithPollInterval(d time.Duration) OVSDBOption {
	return func(o *ovsdbOptions) { o.poll = d }
}

// WithMaxReconnectInterval caps the backoff between reconnection attempts
// (default 2s).
func WithMaxReconnectInterval(d time.Duration) OVSDBOption {
	return func(o *ovsdbOptions) { o.maxReconnect = d }
}

// NewOVSDB connects to the database at endpoint (for example
// "unix:/var/run/openvswitch/db.sock"), retrying until ctx is done if the
// server is not up yet, and starts monitoring the tables kovs uses.
func NewOVSDB(ctx context.Context, endpoint string, opts ...OVSDBOption) (*OVSDB, error) {
	o := ovsdbOptions{log: logrus.NewEntry(logrus.StandardLogger()), poll: 20 * time.Millisecond, maxReconnect: 2 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	log := o.log.WithField("endpoint", endpoint)
	c, err := newLibovsdbClient(endpoint, log, o.maxReconnect)
	if err != nil {
		return nil, err
	}
	db := &OVSDB{client: c, endpoint: endpoint, log: log, poll: o.poll, changes: newCacheChanges()}
	if err := db.connect(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return db, nil
}

func newLibovsdbClient(endpoint string, log *logrus.Entry, maxReconnect time.Duration) (client.Client, error) {
	dbModel, err := databaseModel()
	if err != nil {
		return nil, err
	}
	// libovsdb panics when its reconnect backoff gives up, and the default
	// exponential backoff gives up after 15 minutes: never give up.
	retry := backoff.NewExponentialBackOff()
	retry.InitialInterval = 100 * time.Millisecond
	retry.MaxInterval = maxReconnect
	retry.MaxElapsedTime = 0
	logger := newLogrLogger(log.WithField("component", "libovsdb"))
	c, err := client.NewOVSDBClient(dbModel,
		client.WithEndpoint(endpoint),
		client.WithReconnect(10*time.Second, retry),
		client.WithLogger(&logger))
	if err != nil {
		return nil, fmt.Errorf("create ovsdb client for %s: %w", endpoint, err)
	}
	return c, nil
}

// connect dials until it succeeds or ctx is done, then starts the monitor.
func (c *OVSDB) connect(ctx context.Context) error {
	wait := 100 * time.Millisecond
	for {
		err := c.client.Connect(ctx)
		if err == nil {
			break
		}
		c.log.WithError(err).Debug("ovsdb-server not reachable yet, retrying")
		select {
		case <-ctx.Done():
			return fmt.Errorf("connect to ovsdb %s: %w (last error: %w)", c.endpoint, ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
	m := c.client.NewMonitor()
	m.Tables = tableMonitors()
	if _, err := c.client.Monitor(ctx, m); err != nil {
		return fmt.Errorf("monitor ovsdb %s: %w", c.endpoint, err)
	}
	c.log.Debug("connected to ovsdb and monitoring")
	return nil
}

// Close disconnects for good; the client does not reconnect afterwards.
func (c *OVSDB) Close() {
	c.client.Close()
}

// Connected reports whether the client is connected right now.
func (c *OVSDB) Connected() bool {
	return c.client.Connected()
}

// transact runs ops as one transaction; what says what the transaction does,
// for errors.
// The transaction carries a comment ("kovs: <what>") that ovsdb-server logs,
// so `ovsdb-tool show-log -m` tells who changed what.
func (c *OVSDB) transact(ctx context.Context, what string, ops []ovsdb.Operation) ([]ovsdb.OperationResult, error) {
	comment := "kovs: " + what
	all := append(slices.Clip(ops), ovsdb.Operation{Op: ovsdb.OperationComment, Comment: &comment})
	results, err := c.client.Transact(ctx, all...)
	if err != nil {
		return nil, fmt.Errorf("%s: ovsdb transaction: %w", what, err)
	}
	opErrs, err := ovsdb.CheckOperationResults(results, all)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, describeOperationErrors(err, opErrs))
	}
	return results[:len(ops)], nil
}

// describeOperationErrors names each failed operation and the server's
// reason. The result wraps err and every operation error, so errors.As finds
// an *ovsdb.ConstraintViolation however the server reported it.
func describeOperationErrors(err error, opErrs []ovsdb.OperationError) error {
	if len(opErrs) == 0 {
		return err
	}
	parts := make([]string, 0, len(opErrs))
	wrapped := []error{err}
	for _, e := range opErrs {
		wrapped = append(wrapped, e)
		if op := e.Operation(); op != nil {
			parts = append(parts, fmt.Sprintf("%s %s: %v", op.Op, op.Table, e))
		} else {
			parts = append(parts, e.Error())
		}
	}
	return &transactionError{msg: fmt.Sprintf("%v: %s", err, strings.Join(parts, "; ")), errs: wrapped}
}

// transactionError is a failed transaction and the errors of its operations.
type transactionError struct {
	msg  string
	errs []error
}

func (e *transactionError) Error() string   { return e.msg }
func (e *transactionError) Unwrap() []error { return e.errs }

// isConflict reports whether a transaction failed because another client
// wrote a row with the same name first (a unique index violation).
func isConflict(err error) bool {
	var cv *ovsdb.ConstraintViolation
	return errors.As(err, &cv) || errors.Is(err, errCacheMidUpdate)
}

// errCacheMidUpdate is what reads of the cache that saw another client's transaction
// between them, or half applied, return (a Port its Bridge did not hold when read, or that
// no Bridge references, which the database never holds: Port is not a root table):
// retryWrite reads again.
var errCacheMidUpdate = errors.New("the OVSDB cache is between two rows of one update")

// retryWrite runs write again when it may succeed on a second try:
//   - another client created a row of the same name first: the cache soon
//     shows that row, and the next attempt updates it instead of creating it
//     (a few attempts);
//   - the connection to ovsdb-server was lost while the transaction was on its
//     way, or before the client had noticed the loss (see connectionLost).
//     The server may or may not have committed it. The next
//     attempt waits for the reconnection, which re-monitors the tables before
//     it counts as connected, and builds its operations from that fresh cache,
//     so a committed first attempt is not written twice. Bounded by ctx only,
//     as libovsdb bounds its own wait for a reconnection.
//
// Every write given to it builds its operations from the cache when it runs.
func (c *OVSDB) retryWrite(ctx context.Context, write func() error) error {
	var err error
	for attempt := 1; attempt <= 5; {
		err = write()
		switch {
		case connectionLost(err):
			c.log.WithError(err).Debug("connection to ovsdb lost during a write, retrying once reconnected")
			if werr := c.waitConnected(ctx); werr != nil {
				return fmt.Errorf("%w (then %w)", err, werr)
			}
		case isConflict(err):
			c.log.WithError(err).WithField("attempt", attempt).Debug("concurrent write of the same row, retrying")
			select {
			case <-ctx.Done():
				return err
			case <-time.After(time.Duration(attempt) * 5 * c.poll):
			}
			attempt++
		default:
			return err
		}
	}
	return err
}

// connectionLost reports whether err says the connection to ovsdb-server went
// away under a call, rather than the server refusing it. libovsdb returns
// ErrNotConnected for a call it sent on a connection already shut down, but a
// call still waiting for its reply when the connection drops fails with what
// the reader saw: io.ErrUnexpectedEOF for a closed socket (rpc2 turns EOF into
// it), a reset or a broken pipe otherwise.
func connectionLost(err error) bool {
	return errors.Is(err, client.ErrNotConnected) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, net.ErrClosed)
}

// waitConnected waits, bounded by ctx, until the client is connected again.
// It looks first after one poll interval: libovsdb learns of a lost
// connection asynchronously, and may still say connected right after a call
// failed for it.
func (c *OVSDB) waitConnected(ctx context.Context) error {
	tick := time.NewTicker(c.poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the reconnection to ovsdb %s: %w", c.endpoint, ctx.Err())
		case <-tick.C:
			if c.client.Connected() {
				return nil
			}
		}
	}
}
