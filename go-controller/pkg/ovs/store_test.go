package ovs

import "testing"

func TestSpecValidation(t *testing.T) {
	good := BridgeSpec{Name: "br-int", DatapathType: DatapathNetdev, FailMode: FailModeSecure, Protocols: []string{"OpenFlow15"}}
	if err := good.Validate(); err != nil {
		t.Errorf("valid bridge spec: %v", err)
	}
	for _, bad := range []BridgeSpec{
		{DatapathType: DatapathNetdev},
		{Name: "br-int", DatapathType: "dpdk"},
		{Name: "br-int", DatapathType: DatapathSystem, FailMode: "open"},
		{Name: "br-int", DatapathType: DatapathSystem, Protocols: []string{"OF15"}},
	} {
		if bad.Validate() == nil {
			t.Errorf("invalid bridge spec %+v accepted", bad)
		}
	}
	if err := (PortSpec{Name: "p", OfportRequest: 65279, MAC: "0a:58:0a:f4:01:01"}).Validate(); err != nil {
		t.Errorf("valid port spec: %v", err)
	}
	for _, bad := range []PortSpec{
		{}, {Name: "p", OfportRequest: 65280}, {Name: "p", MTURequest: -1}, {Name: "p", MAC: "nope"},
	} {
		if bad.Validate() == nil {
			t.Errorf("invalid port spec %+v accepted", bad)
		}
	}
}
