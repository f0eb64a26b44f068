package framework

import (
	"encoding/json"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// ShareJSON encodes a node's share without its generation (maps encode in key order), so
// an agent's share and a from-scratch compile are equal exactly when their encodings are.
func ShareJSON(s policy.NodeShare) []byte {
	s.Generation = 0
	b, err := json.Marshal(s)
	if err != nil {
		return []byte(err.Error())
	}
	return b
}

// Clip shortens an encoded share for a failure message.
func Clip(b []byte) string {
	if len(b) > 1500 {
		return string(b[:1500]) + "..."
	}
	return string(b)
}
