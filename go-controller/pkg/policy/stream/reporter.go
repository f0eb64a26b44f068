package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
	"github.com/kovs-net/kovs/go-controller/pkg/runner"
)

// reporter posts the sink's realized generation: after every delivered message, when it
// changes, and at least every ReportRefresh. Its runner reads the sink when asked and at
// least every ReportPoll.
type reporter struct {
	conn    *conn
	sink    policy.Sink
	recv    *receiver
	runner  *runner.BoundedFrequencyRunner
	ctx     context.Context // the connection's, set before the runner loops
	last    uint64
	lastAt  time.Time
	started bool
}

func newReporter(cn *conn, sink policy.Sink, recv *receiver) *reporter {
	rp := &reporter{conn: cn, sink: sink, recv: recv}
	rp.runner = runner.MustNewBoundedFrequencyRunner("realization reports", rp.reportIfDue,
		runner.Bounds{MaxInterval: cn.c.cfg.ReportPoll, Burst: 1})
	return rp
}

// kick asks for a report now.
func (rp *reporter) kick() { rp.runner.Run() }

func (rp *reporter) run(ctx context.Context) {
	rp.ctx = ctx
	var wg sync.WaitGroup
	if n, ok := rp.sink.(RealizedNotifier); ok {
		changed := n.RealizedChanged()
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-changed:
					rp.kick()
				}
			}
		})
	}
	rp.runner.Loop(ctx)
	wg.Wait()
}

// reportIfDue reports the realized generation if it changed or the last report is older
// than ReportRefresh.
func (rp *reporter) reportIfDue() {
	cfg := rp.conn.c.cfg
	gen, ok := rp.recv.current()
	if !ok || (rp.started && gen == rp.last && time.Since(rp.lastAt) < cfg.ReportRefresh) {
		return
	}
	if err := rp.report(rp.ctx, gen); err != nil {
		var se *StatusError
		if errors.As(err, &se) && (se.Code == http.StatusUnauthorized || se.Code == http.StatusForbidden) {
			// The token expired or was revoked: reconnect with the current one (the
			// connection's context ends, and with it the runner's loop).
			rp.conn.cancel(fmt.Errorf("realized report refused: %w", err))
			return
		}
		rp.conn.c.log.WithError(err).WithField("generation", gen).Debug("realized report failed, will retry")
		return
	}
	rp.last, rp.lastAt, rp.started = gen, time.Now(), true
}

func (rp *reporter) report(ctx context.Context, gen uint64) error {
	body, _ := json.Marshal(Realized{Generation: gen})
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := rp.conn.do(ctx, http.MethodPost, RealizedPath(rp.conn.c.cfg.Node), body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return statusError(resp)
}
