package cni

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The CNI socket's requests are decoded by decodeRequest: whatever a local process sends
// is refused with an error or accepted as a request whose fields the agent relies on are
// set and readable, never a panic.
func FuzzDecodeRequest(f *testing.F) {
	f.Add(uint8(0), `{"containerID":"c1","netns":"/var/run/netns/x","ifName":"eth0","pod":{"namespace":"default","name":"a","uid":"u1"},"hostIfName":"veth1","mac":"0a:58:0a:f4:01:05","ips":[{"address":"10.244.1.5/24","gateway":"10.244.1.1"}]}`)
	f.Add(uint8(1), `{"containerID":"c1","ifName":"eth0"}`)
	f.Add(uint8(2), `{"validAttachments":[{"containerID":"c1","ifName":"eth0"}]}`)
	f.Add(uint8(2), `{"validAttachments":[]}`)
	f.Fuzz(func(t *testing.T, kind uint8, body string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/request", strings.NewReader(body))
		w := httptest.NewRecorder()
		switch kind % 3 {
		case 0:
			var req AttachRequest
			if decodeRequest(w, r, &req) == nil {
				if req.Pod.Validate() != nil {
					t.Fatalf("accepted an attach request without a pod: %+v", req)
				}
				if _, err := parseMAC(req.MAC); err != nil {
					t.Fatalf("accepted an attach request with MAC %q: %v", req.MAC, err)
				}
				if _, err := parseIPs(req.IPs); err != nil {
					t.Fatalf("accepted an attach request with IPs %+v: %v", req.IPs, err)
				}
			}
		case 1:
			var req DetachRequest
			if decodeRequest(w, r, &req) == nil && (req.ContainerID == "" || req.IfName == "") {
				t.Fatalf("accepted a detach request naming no attachment: %+v", req)
			}
		default:
			var req GCRequest
			if decodeRequest(w, r, &req) == nil {
				for _, a := range req.ValidAttachments {
					if a.ContainerID == "" || a.IfName == "" {
						t.Fatalf("accepted a GC request with an unnamed attachment: %+v", req)
					}
				}
			}
		}
	})
}
