package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
)

// The protocol's endpoints. Requests and answers are JSON; a failed call answers a
// non-2xx status with an Error.
const (
	pathAdd    = "/v1/add"
	pathDetach = "/v1/detach"
	pathCheck  = "/v1/check"
	pathGC     = "/v1/gc"
	pathStatus = "/v1/status"
)

// maxBodyBytes bounds requests and answers (a GC list of 10,000 sandboxes is ~1 MB).
const maxBodyBytes = 8 << 20

// Client calls the agent over its unix socket; it is what kovs-cni uses, and it
// implements Handler, so the plugin sees the agent as if it were in-process. Every error
// it returns is an *Error; when nothing listens on the socket its chain holds
// ErrAgentUnreachable.
type Client struct {
	http *http.Client
}

var _ Handler = (*Client)(nil)

// NewClient returns a client of the agent serving socketPath. Calls are bounded by their
// context only.
func NewClient(socketPath string) *Client {
	dialer := &net.Dialer{}
	transport := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", socketPath)
		},
		DisableCompression: true,
	}
	return &Client{http: &http.Client{Transport: transport}}
}

// Add asks the agent for the pod's network: it allocates the pod's addresses and MAC,
// plugs the host end into br-int and answers, with the config the pod end gets, once
// the pod's flows (and policy) are installed. The answer is checked before it is used.
func (c *Client) Add(ctx context.Context, req AddRequest) (*PodNetworkConfig, error) {
	var cfg PodNetworkConfig
	if err := c.call(ctx, http.MethodPost, pathAdd, req, &cfg); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, Errorf(CodeInternal, "kovs-agent sent an unusable network config for pod %s: %w", req.Pod, err)
	}
	return &cfg, nil
}

// Detach asks the agent to remove the sandbox's port.
func (c *Client) Detach(ctx context.Context, req DetachRequest) error {
	return c.call(ctx, http.MethodPost, pathDetach, req, nil)
}

// Check asks the agent to verify the sandbox's port and flows.
func (c *Client) Check(ctx context.Context, req AttachRequest) error {
	return c.call(ctx, http.MethodPost, pathCheck, req, nil)
}

// GC asks the agent to remove the ports of sandboxes not in valid.
func (c *Client) GC(ctx context.Context, valid []Attachment) error {
	return c.call(ctx, http.MethodPost, pathGC, GCRequest{ValidAttachments: valid}, nil)
}

// Status asks whether the agent is ready to serve pods.
func (c *Client) Status(ctx context.Context) error {
	return c.call(ctx, http.MethodGet, pathStatus, nil, nil)
}

// call sends in (when not nil) as JSON and decodes a 2xx answer into out (when not nil).
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return Errorf(CodeInternal, "encode %s request: %w", path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://kovs-agent"+path, body)
	if err != nil {
		return Errorf(CodeInternal, "build %s request: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return transportError(ctx, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	limited := io.LimitReader(resp.Body, maxBodyBytes)
	if resp.StatusCode/100 != 2 {
		return answerError(path, resp.Status, limited)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(limited).Decode(out); err != nil {
		return Errorf(CodeInternal, "decode kovs-agent's answer to %s: %w", path, err)
	}
	return nil
}

// transportError explains a call that got no answer.
func transportError(ctx context.Context, path string, err error) error {
	var op *net.OpError
	switch {
	case errors.As(err, &op) && op.Op == "dial" && ctx.Err() == nil:
		e := Errorf(CodeTryAgainLater, "%w: %w", ErrAgentUnreachable, op)
		return e.WithDetails("is kovs-agent running on this node?")
	case ctx.Err() != nil:
		return Errorf(CodeTryAgainLater, "no answer from kovs-agent to %s in time: %w", path, ctx.Err())
	default:
		return Errorf(CodeInternal, "call kovs-agent (%s): %w", path, err)
	}
}

// answerError decodes the Error of a non-2xx answer.
func answerError(path, status string, body io.Reader) error {
	raw, err := io.ReadAll(body)
	if err != nil {
		return Errorf(CodeInternal, "read kovs-agent's %s answer to %s: %w", status, path, err)
	}
	var e Error
	if err := json.Unmarshal(raw, &e); err != nil || e.Msg == "" {
		return Errorf(CodeInternal, "kovs-agent answered %s to %s: %.200q", status, path, raw)
	}
	if e.Code == 0 {
		e.Code = CodeInternal
	}
	return &e
}
