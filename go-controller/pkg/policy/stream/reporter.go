package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// reporter posts the sink's realized generation: after every delivered message, when it
// changes, and at least every ReportRefresh.
type reporter struct {
	conn    *conn
	sink    policy.Sink
	recv    *receiver
	kickCh  chan struct{}
	last    uint64
	lastAt  time.Time
	started bool
}

// kick asks for a report now.
func (rp *reporter) kick() {
	select {
	case rp.kickCh <- struct{}{}:
	default:
	}
}

func (rp *reporter) run(ctx context.Context) {
	cfg := rp.conn.c.cfg
	poll := time.NewTicker(cfg.ReportPoll)
	defer poll.Stop()
	var changed <-chan struct{}
	if n, ok := rp.sink.(RealizedNotifier); ok {
		changed = n.RealizedChanged()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-rp.kickCh:
		case <-changed:
		case <-poll.C:
		}
		gen, ok := rp.recv.current()
		if !ok || (rp.started && gen == rp.last && time.Since(rp.lastAt) < cfg.ReportRefresh) {
			continue
		}
		if err := rp.report(ctx, gen); err != nil {
			var se *StatusError
			if errors.As(err, &se) && (se.Code == http.StatusUnauthorized || se.Code == http.StatusForbidden) {
				// The token expired or was revoked: reconnect with the current one.
				rp.conn.cancel(fmt.Errorf("realized report refused: %w", err))
				return
			}
			rp.conn.c.log.WithError(err).WithField("generation", gen).Debug("realized report failed, will retry")
			continue
		}
		rp.last, rp.lastAt, rp.started = gen, time.Now(), true
	}
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
