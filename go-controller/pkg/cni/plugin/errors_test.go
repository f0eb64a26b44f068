package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
)

func TestCNIError(t *testing.T) {
	agentErr := cni.Errorf(cni.CodeTryAgainLater, "no address allocated yet for pod default/web after 30s").
		WithDetails("is kovs-controller running?")
	unreachable := cni.Errorf(cni.CodeTryAgainLater, "%w: dial unix /var/run/kovs/cni.sock: connect: no such file or directory", cni.ErrAgentUnreachable)
	for _, tc := range []struct {
		name        string
		err         error
		wantCode    uint
		wantMsg     string
		wantDetails string
	}{{
		name:        "agent error keeps code and details, gains context",
		err:         fmt.Errorf("get the network config of pod default/web from kovs-agent: %w", agentErr),
		wantCode:    11,
		wantMsg:     "get the network config of pod default/web from kovs-agent: no address allocated yet for pod default/web after 30s",
		wantDetails: "is kovs-controller running?",
	}, {
		name:     "agent not running",
		err:      fmt.Errorf("attach: %w", unreachable),
		wantCode: 11,
		wantMsg:  "attach: kovs-agent not running: dial unix /var/run/kovs/cni.sock: connect: no such file or directory",
	}, {
		name:     "our code wins over the agent's",
		err:      withCode(types.ErrPluginNotAvailable, unreachable),
		wantCode: 50,
		wantMsg:  "kovs-agent not running",
	}, {
		name:     "invalid config",
		err:      withCode(types.ErrInvalidNetworkConfig, errors.New("bad socket")),
		wantCode: 7,
		wantMsg:  "bad socket",
	}, {
		name:     "anything else",
		err:      fmt.Errorf("create veth: %w", context.DeadlineExceeded),
		wantCode: 999,
		wantMsg:  "create veth: context deadline exceeded",
	}, {
		name:     "a CNI error passes through",
		err:      types.NewError(types.ErrIncompatibleCNIVersion, "old", ""),
		wantCode: 1,
		wantMsg:  "old",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var te *types.Error
			if !errors.As(cniError(tc.err), &te) {
				t.Fatalf("cniError(%v) is not a *types.Error", tc.err)
			}
			if te.Code != tc.wantCode || !strings.Contains(te.Msg, tc.wantMsg) || te.Details != tc.wantDetails {
				t.Errorf("cniError = %+v, want code %d msg %q details %q", te, tc.wantCode, tc.wantMsg, tc.wantDetails)
			}
		})
	}
	if cniError(nil) != nil {
		t.Error("cniError(nil) != nil")
	}
}
