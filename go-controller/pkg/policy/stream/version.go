package stream

import (
	"fmt"
	"net/http"
	"strconv"
)

// The stream's protocol version. The controller names it in the ProtocolHeader of every
// policy stream it serves; an agent takes policy only from a controller whose version is
// MinProtocolVersion or later.
//
//	1  (no header) the releases up to the pod address change of 2026-12-05: the controller
//	   allocates pod addresses, annotates pods with them and compiles NetworkPolicy from
//	   those annotations.
//	2  the node agents allocate pod addresses; the controller compiles NetworkPolicy from
//	   the pods' status.podIPs.
//
// An agent of version 2 beside a controller of version 1 would give pods addresses while
// the controller hands out, annotates and enforces others (docs/upgrades.md), so it
// refuses that controller's policy (ControllerTooOldError).
const (
	ProtocolHeader     = "Kovs-Policy-Stream-Version"
	ProtocolVersion    = 2
	MinProtocolVersion = 2
)

// ControllerTooOldError is the refusal of a controller whose stream is older than
// MinProtocolVersion: the controller must be upgraded before the agents.
type ControllerTooOldError struct {
	// Version is the controller's protocol version (1 when it names none).
	Version int
}

func (e *ControllerTooOldError) Error() string {
	return fmt.Sprintf("kovs-controller serves policy stream version %d, older than this agent needs (%d: pod addresses allocated on the nodes): "+
		"upgrade kovs-controller first; this agent takes no policy and accepts no new pod until then, and leaves the node's flows as they are (docs/upgrades.md)",
		e.Version, MinProtocolVersion)
}

// ControllerNotifier is implemented by a Sink that wants to know whether the controller
// it follows is one it may take policy from: the client calls ControllerCompatible on
// every connection the controller answered, with nil or a *ControllerTooOldError.
type ControllerNotifier interface {
	ControllerCompatible(err error)
}

// checkProtocol returns a *ControllerTooOldError when the stream's response names a
// protocol version older than MinProtocolVersion, or none.
func checkProtocol(resp *http.Response) error {
	version := 1
	if v := resp.Header.Get(ProtocolHeader); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("kovs-controller's %s header %q is not a number", ProtocolHeader, v)
		}
		version = n
	}
	if version < MinProtocolVersion {
		return &ControllerTooOldError{Version: version}
	}
	return nil
}
