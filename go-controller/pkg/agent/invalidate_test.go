package agent

import "testing"

func TestTouchesPolicyFindsPolicyTablesOnly(t *testing.T) {
	for _, tc := range []struct {
		texts []string
		want  bool
	}{
		{[]string{"table=70,priority=100,reg1=0x5"}, true},
		{[]string{"cookie=0x1, table=50, priority=50,in_port=3 actions=drop"}, true},
		{[]string{"cookie=0x1, table=60, priority=200,ip,nw_dst=10.0.0.2 actions=goto_table:61"}, false},
		{[]string{"priority=0 actions=drop"}, false},
		{nil, false},
	} {
		if got := touchesPolicy(tc.texts); got != tc.want {
			t.Errorf("touchesPolicy(%q) = %v, want %v", tc.texts, got, tc.want)
		}
	}
}
