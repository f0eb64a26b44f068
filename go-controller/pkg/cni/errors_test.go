package cni

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
)

func TestAsError(t *testing.T) {
	coded := Errorf(CodeTryAgainLater, "not allocated yet").WithDetails("hint")
	for _, tc := range []struct {
		name     string
		err      error
		wantCode Code
		wantMsg  string
	}{
		{"coded", coded, CodeTryAgainLater, "not allocated yet"},
		{"wrapped coded keeps the context", fmt.Errorf("wait for pod: %w", coded), CodeTryAgainLater, "wait for pod: not allocated yet"},
		{"canceled", fmt.Errorf("wait: %w", context.Canceled), CodeTryAgainLater, "wait: context canceled"},
		{"plain", errors.New("boom"), CodeInternal, "boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := AsError(tc.err)
			if e.Code != tc.wantCode || e.Msg != tc.wantMsg {
				t.Errorf("AsError = %+v, want code %d msg %q", e, tc.wantCode, tc.wantMsg)
			}
			if !errors.Is(e, tc.err) && !errors.Is(tc.err, e) {
				t.Errorf("AsError lost the chain of %v", tc.err)
			}
		})
	}
	if AsError(fmt.Errorf("x: %w", coded)).Details != "hint" {
		t.Error("AsError dropped the details of a wrapped Error")
	}
	if AsError(nil) != nil {
		t.Error("AsError(nil) != nil")
	}
}

func TestErrorfKeepsTheChain(t *testing.T) {
	cause := errors.New("connection refused")
	err := Errorf(CodeTryAgainLater, "%w: %w", ErrAgentUnreachable, cause)
	if !errors.Is(err, ErrAgentUnreachable) || !errors.Is(err, cause) {
		t.Errorf("Errorf lost a wrapped error: %v", err)
	}
}

func TestHTTPStatus(t *testing.T) {
	for code, want := range map[Code]int{
		CodeInvalidConfig:    http.StatusBadRequest,
		CodeUnknownContainer: http.StatusNotFound,
		CodeTryAgainLater:    http.StatusServiceUnavailable,
		CodeNotAvailable:     http.StatusServiceUnavailable,
		CodeInternal:         http.StatusInternalServerError,
	} {
		if got := httpStatus(code); got != want {
			t.Errorf("httpStatus(%d) = %d, want %d", code, got, want)
		}
	}
}
