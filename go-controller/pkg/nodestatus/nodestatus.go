// Package nodestatus is the JSON document kovs-agent serves on /status and `kovsctl
// status` reads: the agent's own account of its node. It is the whole of the agent's API
// that kovsctl needs, so kovsctl does not import the agent.
package nodestatus

import "time"

// Path is where the agent serves the Status, on its health address.
const Path = "/status"

// Status is the agent's own account of its node.
type Status struct {
	Node   string    `json:"node"`
	Time   time.Time `json:"time"`
	Live   bool      `json:"live"`
	Ready  bool      `json:"ready"`
	Checks []Check   `json:"checks"`
	// Bridge is the bridge the agent owns; Round its cookie round (this incarnation).
	Bridge string `json:"bridge"`
	Round  uint64 `json:"round,omitempty"`
	Flows  Flows  `json:"flows"`
	Pods   int    `json:"pods"`
	Peers  []Peer `json:"peers"`
	// RejectedPeers are the Nodes whose records are unusable for this node (no routes to
	// them), with the reason.
	RejectedPeers []RejectedPeer `json:"rejectedPeers,omitempty"`
	// Policy is nil when NetworkPolicy is not enforced on the node.
	Policy *Policy `json:"policy,omitempty"`
}

// Flows is the state of br-int's flows as the agent installed them.
type Flows struct {
	// Installed counts the flows the agent installed; ByTable by table name.
	Installed int            `json:"installed"`
	ByTable   map[string]int `json:"byTable,omitempty"`
	// DesiredGeneration is the node state's generation; InstalledGeneration the one
	// whose flows are on the switch. They differ while a sync is due or failing.
	DesiredGeneration   uint64    `json:"desiredGeneration"`
	InstalledGeneration uint64    `json:"installedGeneration"`
	LastSync            time.Time `json:"lastSync,omitzero"`
	LastFullSync        time.Time `json:"lastFullSync,omitzero"`
	LastError           string    `json:"lastError,omitempty"`
}

// Peer is one tunnel peer.
type Peer struct {
	Node     string   `json:"node"`
	TunnelIP string   `json:"tunnelIP"`
	Subnets  []string `json:"subnets"`
}

// RejectedPeer is a Node the agent has no tunnel peer for, and why.
type RejectedPeer struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
}

// Policy is the node's NetworkPolicy share: the newest generation received from
// kovs-controller and the newest whose flows are installed.
type Policy struct {
	Received           bool   `json:"received"`
	Connected          *bool  `json:"connected,omitempty"`
	ReceivedGeneration uint64 `json:"receivedGeneration"`
	RealizedGeneration uint64 `json:"realizedGeneration"`
	Rules              int    `json:"rules"`
}

// Check is one named health condition and its outcome.
type Check struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Message says what is wrong, or a detail when OK.
	Message string `json:"message,omitempty"`
}

// UninstallAnnotation, set to "true" on the agent's DaemonSet (`kovsctl uninstall`), is
// the operator's request to remove kovs from every node: an agent cleans its node up at
// shutdown only when its DaemonSet is deleted carrying it. A DaemonSet deleted without it
// (`kubectl delete ds --cascade=orphan` and a new apply, a GitOps replace) leaves the
// nodes as they are.
const UninstallAnnotation = "kovs.io/uninstall"
