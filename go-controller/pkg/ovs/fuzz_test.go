package ovs

import (
	"os"
	"testing"
)

// ovs-ofctl's dumps and ofproto/trace's output are what the agent and kovsctl read back
// from the switch; a parser must refuse what it cannot read, never panic, and what it
// reads must read the same again (without its statistics, which String leaves out).

func seedFile(f *testing.F, name string) {
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(b))
}

func FuzzParseFlowDump(f *testing.F) {
	seedFile(f, "dump-flows.txt")
	seedFile(f, "dump-flows-no-stats.txt")
	f.Add("cookie=0x1, table=Classifier, priority=10,ip actions=goto_table:10")
	f.Fuzz(func(t *testing.T, out string) {
		flows, err := ParseFlowDump(out)
		if err != nil {
			return
		}
		for _, fl := range flows {
			again, err := ParseFlow(fl.String())
			if err != nil {
				t.Fatalf("%+v renders %q, which does not parse: %v", fl, fl.String(), err)
			}
			want := fl
			want.Packets, want.Bytes = 0, 0 // String renders no statistics
			if again != want {
				t.Fatalf("%+v renders %q, which parses to %+v", fl, fl.String(), again)
			}
			_, _ = fl.Flow() // typed reading: may refuse, must not panic
		}
	})
}

func FuzzParseGroupDump(f *testing.F) {
	seedFile(f, "dump-groups.txt")
	f.Fuzz(func(t *testing.T, out string) {
		_, _ = ParseGroupDump(out)
	})
}

func FuzzParseTrace(f *testing.F) {
	f.Add("Flow: ip,in_port=3\n\nbridge(\"br-int\")\n----------------\n 0. ip,in_port=3, priority 100, cookie 0x1\n    goto_table:10\n10. priority 0\n    drop\n\nFinal flow: unchanged\nDatapath actions: drop\n", "br-int")
	f.Fuzz(func(t *testing.T, text, bridge string) {
		tr := ParseTrace(text, bridge)
		_ = tr.Dropped()
		_ = tr.ReturnedToSender()
		_, _ = tr.LastStep()
	})
}
