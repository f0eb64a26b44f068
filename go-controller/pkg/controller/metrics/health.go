package metrics

import (
	"fmt"
	"net/http"
	"sync"
)

// Health answers /healthz and /readyz for kovs-controller.
//
// Live: the process serves, and, while leading, the leader election loop renews its
// lease (Live is told how: the leader election watchdog).
// Ready: on standby, once leader election runs (the replica can take over); while
// leading, once the informers synced and the address allocator was rebuilt from the API.
type Health struct {
	mu       sync.Mutex
	live     func(*http.Request) error
	electing bool
	leading  bool
	synced   bool
}

// NewHealth returns the health of a replica that has not started yet.
func NewHealth() *Health { return &Health{} }

// SetLive sets the liveness check (none: alive while serving), such as the leader
// election watchdog's Check.
func (h *Health) SetLive(check func(*http.Request) error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.live = check
}

// Electing records that leader election runs (or, without it, that the controllers are
// about to start).
func (h *Health) Electing() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.electing = true
}

// Leading records whether this replica leads; a new term starts unsynced.
func (h *Health) Leading(leading bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leading, h.synced = leading, false
}

// Synced records that the controllers' informers synced and their state was rebuilt.
func (h *Health) Synced() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.synced = true
}

// Ready says whether the replica is ready, and in what role or why not.
func (h *Health) Ready() (bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case !h.electing:
		return false, "starting"
	case h.leading && h.synced:
		return true, "leader"
	case h.leading:
		return false, "leader: informers not synced yet"
	default:
		return true, "standby"
	}
}

func (h *Health) serveLive(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	live := h.live
	h.mu.Unlock()
	if live != nil {
		if err := live(r); err != nil {
			http.Error(w, fmt.Sprintf("unhealthy: %v", err), http.StatusInternalServerError)
			return
		}
	}
	_, _ = fmt.Fprintln(w, "ok")
}

func (h *Health) serveReady(w http.ResponseWriter, _ *http.Request) {
	ok, why := h.Ready()
	if !ok {
		http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
		return
	}
	_, _ = fmt.Fprintln(w, "ok: "+why)
}
