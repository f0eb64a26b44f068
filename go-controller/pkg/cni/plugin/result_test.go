package plugin

import (
	"bytes"
	"encoding/json"
	"net"
	"testing"

	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"
	"github.com/vishvananda/netlink"
)

func testResult(t *testing.T) *types100.Result {
	t.Helper()
	spec, err := newPodInterfaceSpec("eth0", dualStackConfig())
	if err != nil {
		t.Fatal(err)
	}
	hostMAC, _ := net.ParseMAC("ae:12:34:56:78:9a")
	host := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "kv4f1c2a9b7e3d", HardwareAddr: hostMAC}}
	return newResult(host, spec, "/var/run/netns/pod")
}

func TestResult(t *testing.T) {
	var out bytes.Buffer
	if err := printResult(&out, testResult(t), "1.1.0"); err != nil {
		t.Fatal(err)
	}
	parsed, err := create.Create("1.1.0", out.Bytes())
	if err != nil {
		t.Fatalf("result is not valid CNI 1.1.0: %v\n%s", err, out.String())
	}
	r, err := types100.NewResultFromResult(parsed)
	if err != nil {
		t.Fatal(err)
	}
	if r.CNIVersion != "1.1.0" || len(r.Interfaces) != 2 {
		t.Fatalf("result = %s", out.String())
	}
	host, pod := r.Interfaces[0], r.Interfaces[1]
	if host.Name != "kv4f1c2a9b7e3d" || host.Mac != "ae:12:34:56:78:9a" || host.Sandbox != "" {
		t.Errorf("host interface = %+v", host)
	}
	if pod.Name != "eth0" || pod.Mac != "0a:58:0a:f4:01:05" || pod.Sandbox != "/var/run/netns/pod" || pod.Mtu != 1450 {
		t.Errorf("pod interface = %+v", pod)
	}
	if len(r.IPs) != 2 {
		t.Fatalf("IPs = %v", r.IPs)
	}
	for _, ip := range r.IPs {
		if ip.Interface == nil || *ip.Interface != 1 || ip.Gateway == nil {
			t.Errorf("IP %v: interface %v gateway %v, want the pod interface (1) and a gateway", ip.Address.String(), ip.Interface, ip.Gateway)
		}
	}
	if r.IPs[0].Address.String() != "10.244.1.5/24" || r.IPs[1].Address.String() != "fd00:10:244:1::5/64" {
		t.Errorf("addresses = %v, %v", r.IPs[0].Address.String(), r.IPs[1].Address.String())
	}
	if len(r.Routes) != 2 || r.Routes[0].Dst.String() != "0.0.0.0/0" || r.Routes[1].Dst.String() != "::/0" {
		t.Errorf("routes = %v", r.Routes)
	}
}

func TestResultInOlderVersions(t *testing.T) {
	for _, v := range []string{"0.3.1", "0.4.0", "1.0.0", ""} {
		var out bytes.Buffer
		if err := printResult(&out, testResult(t), v); err != nil {
			t.Errorf("version %q: %v", v, err)
			continue
		}
		var got map[string]any
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Errorf("version %q: %v", v, err)
		}
		want := v
		if v == "" {
			want = "0.1.0"
		}
		if got["cniVersion"] != want {
			t.Errorf("version %q: result says %v", v, got["cniVersion"])
		}
	}
}
