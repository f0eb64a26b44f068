package stream

import (
	"fmt"
	"io"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// Defaults shared by the controller and the agents.
const (
	// TokenAudience is the audience of the agents' ServiceAccount tokens: a token made for
	// the controller is refused by kube-apiserver, and the reverse.
	TokenAudience = "kovs-controller"
	// DefaultServerName is the name agents verify the controller's certificate for.
	DefaultServerName = "kovs-controller.kube-system.svc"
	// DefaultPort is where the controller serves the stream.
	DefaultPort = 9443
	// CAKey is the key of the CA bundle in the kovs-ca ConfigMap.
	CAKey = "ca.crt"
	// ContentType is the media type of the stream: one JSON Message per line.
	ContentType = "application/x-ndjson"
)

// PolicyPath is the path of a node's policy stream.
func PolicyPath(node string) string { return "/v1/nodes/" + node + "/policy" }

// RealizedPath is the path a node's agent reports its realized generation to.
func RealizedPath(node string) string { return "/v1/nodes/" + node + "/realized" }

// MessageType says what a Message carries.
type MessageType string

// The message types.
const (
	MessageSnapshot  MessageType = "snapshot"
	MessageDelta     MessageType = "delta"
	MessageKeepalive MessageType = "keepalive"
)

// Message is one line of the stream.
type Message struct {
	Type MessageType `json:"type"`
	// Generation is the generation of the node's share once the message is applied (for a
	// keepalive: of the last message sent, 0 before the snapshot).
	Generation uint64            `json:"generation"`
	Snapshot   *policy.NodeShare `json:"snapshot,omitempty"`
	Delta      *policy.Delta     `json:"delta,omitempty"`
}

// Realized is the body of a realized report.
type Realized struct {
	Generation uint64 `json:"generation"`
}

// check verifies that a decoded message is complete and for node.
func (m *Message) check(node string) error {
	switch m.Type {
	case MessageSnapshot:
		if m.Snapshot == nil || m.Snapshot.Node != node || m.Snapshot.Generation != m.Generation {
			return fmt.Errorf("malformed snapshot for node %s", node)
		}
	case MessageDelta:
		if m.Delta == nil || m.Delta.Node != node || m.Delta.Generation != m.Generation {
			return fmt.Errorf("malformed delta for node %s", node)
		}
	case MessageKeepalive:
	default:
		return fmt.Errorf("unknown message type %q", m.Type)
	}
	return nil
}

// messageWriter writes messages, one JSON document per line, through setEncodings shared
// by every stream of a server: the lists they keep are written from there (line).
type messageWriter struct {
	w    io.Writer
	sets *setEncodings
	line line
}

func newMessageWriter(w io.Writer, sets *setEncodings) *messageWriter {
	return &messageWriter{w: w, sets: sets}
}

func (w *messageWriter) write(m Message) error {
	w.line.buf, w.line.shared = w.line.buf[:0], w.line.shared[:0]
	if err := w.sets.appendMessage(&w.line, m); err != nil {
		return fmt.Errorf("encode the %s of generation %d: %w", m.Type, m.Generation, err)
	}
	w.line.buf = append(w.line.buf, '\n')
	err := w.line.writeTo(w.w)
	// The buffers are kept for the next message only while small: each of thousands of
	// streams keeping the largest message it ever wrote would hold much more than its
	// share. The shared lists are not the stream's: the references go.
	clear(w.line.shared)
	if cap(w.line.buf) > maxKeptBuffer {
		w.line.buf = nil
	}
	if cap(w.line.shared) > maxKeptSplices {
		w.line.shared = nil
	}
	return err
}

// maxKeptSplices is the most splices a stream keeps room for between messages.
const maxKeptSplices = 64

// maxKeptBuffer is the largest buffer a stream keeps between messages.
const maxKeptBuffer = 16 << 10
