package ipam

import (
	"errors"
	"strings"
	"testing"
)

func dualStackPodNetwork(t *testing.T) PodNetwork {
	t.Helper()
	n, err := NewPodNetwork([]PodAddress{
		{Address: prefix("fd00:10:244:1::5/64"), Gateway: addr("fd00:10:244:1::1")},
		{Address: prefix("10.244.1.5/24"), Gateway: addr("10.244.1.1")},
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestPodNetworkAnnotation(t *testing.T) {
	tests := []struct {
		name  string
		addrs []PodAddress
		want  string
	}{
		{
			name: "dual-stack",
			addrs: []PodAddress{
				{Address: prefix("fd00:10:244:1::5/64"), Gateway: addr("fd00:10:244:1::1")},
				{Address: prefix("10.244.1.5/24"), Gateway: addr("10.244.1.1")},
			},
			want: `{"ips":[{"address":"10.244.1.5/24","gateway":"10.244.1.1"},{"address":"fd00:10:244:1::5/64","gateway":"fd00:10:244:1::1"}],` +
				`"mac":"0a:58:0a:f4:01:05",` +
				`"routes":[{"dest":"0.0.0.0/0","nextHop":"10.244.1.1"},{"dest":"::/0","nextHop":"fd00:10:244:1::1"}]}`,
		},
		{
			name:  "IPv6 only",
			addrs: []PodAddress{{Address: prefix("fd00:10:244:1::bc01:2345/64"), Gateway: addr("fd00:10:244:1::1")}},
			want: `{"ips":[{"address":"fd00:10:244:1::bc01:2345/64","gateway":"fd00:10:244:1::1"}],` +
				`"mac":"0a:58:bc:01:23:45","routes":[{"dest":"::/0","nextHop":"fd00:10:244:1::1"}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := NewPodNetwork(tt.addrs)
			if err != nil {
				t.Fatal(err)
			}
			got, err := n.Annotation()
			if err != nil || got != tt.want {
				t.Fatalf("Annotation =\n%s, %v\nwant\n%s", got, err, tt.want)
			}
			back, err := ParsePodNetwork(got)
			if err != nil {
				t.Fatalf("ParsePodNetwork: %v", err)
			}
			if again, _ := back.Annotation(); again != got {
				t.Errorf("round trip changed the annotation:\n%s\n%s", got, again)
			}
		})
	}
}

// TestPodNetworkRecordsItsPod: the record names the pod UID it was allocated to, and a
// record whose UID is too long to be a pod's is refused.
func TestPodNetworkRecordsItsPod(t *testing.T) {
	n := dualStackPodNetwork(t)
	n.UID = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	v, err := n.Annotation()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(v, `"mac":"0a:58:0a:f4:01:05","uid":"7c9e6679-7425-40de-944b-e07fc1f90ae7","routes"`) {
		t.Errorf("the record does not carry the UID after the MAC: %s", v)
	}
	back, err := ParsePodNetwork(v)
	if err != nil || back.UID != n.UID {
		t.Fatalf("ParsePodNetwork = %+v, %v", back, err)
	}
	n.UID = strings.Repeat("x", 129)
	if _, err := n.Annotation(); err == nil || !strings.Contains(err.Error(), "uid") {
		t.Errorf("a 129-character UID: %v, want an error naming uid", err)
	}
}

func TestPodNetworkAccessors(t *testing.T) {
	n := dualStackPodNetwork(t)
	if a, ok := n.Address(IPv6); !ok || a.Address != prefix("fd00:10:244:1::5/64") {
		t.Errorf("Address(IPv6) = %v, %v", a, ok)
	}
	if got := n.GatewayMAC().String(); got != "0a:58:0a:f4:01:01" {
		t.Errorf("GatewayMAC = %s", got)
	}
}

func TestParsePodNetworkErrors(t *testing.T) {
	valid := `{"ips":[{"address":"10.244.1.5/24","gateway":"10.244.1.1"}],"mac":"0a:58:0a:f4:01:05","routes":[{"dest":"0.0.0.0/0","nextHop":"10.244.1.1"}]}`
	tests := []struct {
		name      string
		value     string
		wantField string
		wantMsg   string
	}{
		{"not JSON", `{"ips":`, "", "invalid kovs.io/pod-network annotation"},
		{"wrong shape", `{"ips":"10.244.1.5"}`, "", "cannot unmarshal"},
		{"no ips", `{"mac":"0a:58:0a:f4:01:05"}`, "ips", "no address"},
		{"bad address", strings.Replace(valid, "10.244.1.5/24", "10.244.1.300/24", 1), "ips[0].address", "10.244.1.300"},
		{"address without length", strings.Replace(valid, "10.244.1.5/24", "10.244.1.5", 1), "ips[0].address", "no '/'"},
		{"gateway outside", strings.Replace(valid, `"gateway":"10.244.1.1"`, `"gateway":"10.244.2.1"`, 1), "ips[0].gateway", "not another address of 10.244.1.0/24"},
		{"gateway is the pod", strings.Replace(valid, `"gateway":"10.244.1.1"`, `"gateway":"10.244.1.5"`, 1), "ips[0].gateway", "not another address"},
		{"bad gateway", strings.Replace(valid, `"gateway":"10.244.1.1"`, `"gateway":"gw"`, 1), "ips[0].gateway", `"gw"`},
		{"bad MAC", strings.Replace(valid, "0a:58:0a:f4:01:05", "0a:58", 1), "mac", "0a:58"},
		{"multicast MAC", strings.Replace(valid, "0a:58:0a:f4:01:05", "01:00:5e:00:00:01", 1), "mac", "not a unicast MAC"},
		{"route family", strings.Replace(valid, `"dest":"0.0.0.0/0"`, `"dest":"::/0"`, 1), "routes[0].nextHop", "not an IPv6 address"},
		{"route off-link", strings.Replace(valid, `"nextHop":"10.244.1.1"`, `"nextHop":"10.9.9.9"`, 1), "routes[0].nextHop", "not on the pod's subnets"},
		{"route dest", strings.Replace(valid, `"dest":"0.0.0.0/0"`, `"dest":"10.0.0.1/8"`, 1), "routes[0].dest", "not a network prefix"},
		{
			"two IPv4 addresses",
			`{"ips":[{"address":"10.244.1.5/24","gateway":"10.244.1.1"},{"address":"10.244.1.6/24","gateway":"10.244.1.1"}],"mac":"0a:58:0a:f4:01:05"}`,
			"ips[1].address", "a pod has one address per family",
		},
	}
	if _, err := ParsePodNetwork(valid); err != nil {
		t.Fatalf("valid annotation: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParsePodNetwork(tt.value)
			var ae *AnnotationError
			if !errors.As(err, &ae) {
				t.Fatalf("ParsePodNetwork = %v, want an *AnnotationError", err)
			}
			if ae.Field != tt.wantField || ae.Annotation != PodNetworkAnnotationKey {
				t.Errorf("field = %q, want %q (error %v)", ae.Field, tt.wantField, err)
			}
			wantErrContains(t, err, tt.wantMsg)
		})
	}
}

func TestParsePodNetworkIgnoresUnknownFields(t *testing.T) {
	_, err := ParsePodNetwork(`{"ips":[{"address":"10.244.1.5/24","gateway":"10.244.1.1"}],"mac":"0a:58:0a:f4:01:05","mtu":1400}`)
	if err != nil {
		t.Errorf("ParsePodNetwork with a newer field: %v", err)
	}
}
