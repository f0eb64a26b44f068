package agent

import (
	"context"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// ofSwitch is br-int's OpenFlow side as the flow syncer sees it.
type ofSwitch struct{ of ovs.FlowClient }

func (s ofSwitch) Apply(ctx context.Context, deletes, adds []string) error {
	mods := make([]ovs.Mod, 0, len(deletes)+len(adds))
	for _, d := range deletes {
		mods = append(mods, ovs.DeleteFlowStrict(d))
	}
	for _, a := range adds {
		mods = append(mods, ovs.AddFlow(a))
	}
	return s.of.Bundle(ctx, mods)
}

func (s ofSwitch) Flows(ctx context.Context) ([]string, error) {
	entries, err := s.of.DumpFlows(ctx, 0, 0)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.String()
	}
	return out, nil
}

// nextRound is the round for this agent incarnation: one past the newest round of the
// flows on the switch, so every flow this agent installs is told apart from its
// predecessor's, and the predecessor's flows stay until they are replaced.
func nextRound(ctx context.Context, of ovs.FlowClient) (pipeline.Round, error) {
	entries, err := of.DumpFlows(ctx, 0, 0)
	if err != nil {
		return 0, err
	}
	newest := pipeline.Round(0)
	for _, e := range entries {
		c := pipeline.Cookie(e.Cookie)
		if c.Owned() && c.Round() > newest {
			newest = c.Round()
		}
	}
	next := newest + 1
	if next == 0 {
		next = 1
	}
	return next, nil
}
