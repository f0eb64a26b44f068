package policy

// Sink is where a node's share arrives: the agent implements it, the stream client from
// kovs-controller feeds it. The client calls Snapshot on every (re)connect and Delta for
// every change after it; an error from Delta (ErrGeneration: a delta was missed) makes the
// client reconnect for a fresh snapshot. Realized is the generation whose flows the node
// has installed; the client reports it to the controller.
type Sink interface {
	Snapshot(share NodeShare) error
	Delta(d Delta) error
	Realized() uint64
}
