package cni

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// Code is a CNI error code (CNI spec, "Error" section). The agent's errors carry one
// across the socket and kovs-cni returns it to the container runtime unchanged, so the
// runtime can tell "try again later" from "this will never work".
type Code uint

// The codes kovs uses. Their values are the CNI spec's.
const (
	// CodeUnknownContainer: the agent knows no attachment for the sandbox (CHECK).
	CodeUnknownContainer Code = 3
	// CodeInvalidConfig: a request or the network config is wrong; retrying won't help.
	CodeInvalidConfig Code = 7
	// CodeTryAgainLater: a transient condition (agent not running or not ready yet, pod
	// addresses not allocated yet, a deadline passed); the runtime should retry.
	CodeTryAgainLater Code = 11
	// CodeNotAvailable: the plugin cannot serve ADD now (STATUS).
	CodeNotAvailable Code = 50
	// CodeInternal: anything else.
	CodeInternal Code = 999
)

// ErrAgentUnreachable is in the chain of the error the Client returns when nothing accepts
// connections on the agent socket (missing socket, or a stale one: connection refused).
// kovs-cni's DEL treats it as "the agent will reconcile on start" rather than as a failure.
var ErrAgentUnreachable = errors.New("kovs-agent not running")

// Error is an error as it crosses the socket, encoded as {"code", "msg", "details"}.
// Msg is written for people (it ends up in `kubectl describe pod`); Details is an optional
// hint or longer explanation that runtimes show after it.
type Error struct {
	Code    Code   `json:"code"`
	Msg     string `json:"msg"`
	Details string `json:"details,omitempty"`

	cause error // the chain behind Msg on the side that made the error; never sent
}

// Errorf returns an Error with code and a message formatted like fmt.Errorf; errors
// wrapped with %w stay reachable through errors.Is and errors.As.
func Errorf(code Code, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	return &Error{Code: code, Msg: err.Error(), cause: err}
}

// WithDetails returns a copy of e with details set.
func (e *Error) WithDetails(details string) *Error {
	c := *e
	c.Details = details
	return &c
}

// Error returns the message; the details travel separately.
func (e *Error) Error() string { return e.Msg }

// Unwrap returns what the error was made from, on the side that made it.
func (e *Error) Unwrap() error { return e.cause }

// AsError returns err as an Error: itself when its chain holds one, code
// CodeTryAgainLater for a canceled or expired context, CodeInternal otherwise.
func AsError(err error) *Error {
	var e *Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &e):
		if e.Error() == err.Error() {
			return e
		}
		// Keep the context the chain added in front of the message.
		return &Error{Code: e.Code, Msg: err.Error(), Details: e.Details, cause: err}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return &Error{Code: CodeTryAgainLater, Msg: err.Error(), cause: err}
	default:
		return &Error{Code: CodeInternal, Msg: err.Error(), cause: err}
	}
}

// httpStatus is the HTTP status the server answers an error with. Clients decide on the
// code in the body; the status only keeps the exchange readable with curl.
func httpStatus(code Code) int {
	switch code {
	case CodeInvalidConfig:
		return http.StatusBadRequest
	case CodeUnknownContainer:
		return http.StatusNotFound
	case CodeTryAgainLater, CodeNotAvailable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}
