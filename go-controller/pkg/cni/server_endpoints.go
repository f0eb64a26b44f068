package cni

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/sirupsen/logrus"
)

// request is what an endpoint decodes: each checks its own fields before the Handler
// sees it.
type request interface {
	Validate() error
}

// statusRequest is the (empty) request of GET /v1/status.
type statusRequest struct{}

func (statusRequest) Validate() error { return nil }

// routes maps the protocol's endpoints to the Handler.
func (s *Server) routes() http.Handler {
	h := s.handler
	mux := http.NewServeMux()
	mux.Handle("POST "+pathAdd, endpoint(s, "add", func(ctx context.Context, req AddRequest) (any, error) {
		cfg, err := h.Add(ctx, req)
		if err == nil && cfg == nil {
			err = Errorf(CodeInternal, "kovs-agent has no network config for pod %s and no error", req.Pod)
		}
		return cfg, err
	}))
	mux.Handle("POST "+pathDetach, endpoint(s, "detach", noAnswer(h.Detach)))
	mux.Handle("POST "+pathCheck, endpoint(s, "check", noAnswer(h.Check)))
	mux.Handle("POST "+pathGC, endpoint(s, "gc", func(ctx context.Context, r GCRequest) (any, error) {
		return nil, h.GC(ctx, r.ValidAttachments)
	}))
	mux.Handle("GET "+pathStatus, endpoint(s, "status", func(ctx context.Context, _ statusRequest) (any, error) {
		return nil, h.Status(ctx)
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, Errorf(CodeInvalidConfig, "kovs-agent does not serve %s %s (are kovs-cni and kovs-agent of different versions?)", r.Method, r.URL.Path))
	})
	return mux
}

// noAnswer adapts a Handler method that answers only with an error.
func noAnswer[Req request](call func(context.Context, Req) error) func(context.Context, Req) (any, error) {
	return func(ctx context.Context, req Req) (any, error) { return nil, call(ctx, req) }
}

// endpoint decodes and validates a Req, calls the Handler and encodes its answer: 200
// with JSON, 204 when there is nothing to say, or an Error.
func endpoint[Req request](s *Server, op string, call func(context.Context, Req) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		var req Req
		log := s.log.WithField("op", op).WithFields(peerFields(r.Context()))
		var out any
		err := decodeRequest(w, r, &req)
		if err == nil {
			log = log.WithFields(requestFields(req))
			out, err = safeCall(r.Context(), op, req, call)
		}
		log = log.WithField("duration", time.Since(start).Round(time.Millisecond))
		if err != nil {
			e := AsError(err)
			logFailure(log, e)
			writeError(w, e)
			return
		}
		log.Debug("CNI request served")
		if out == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeJSON(w, http.StatusOK, out)
	})
}

// decodeRequest reads r's JSON body (GET has none) into req and validates it.
func decodeRequest[Req request](w http.ResponseWriter, r *http.Request, req *Req) error {
	if r.Method != http.MethodGet {
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
		if err := dec.Decode(req); err != nil {
			return Errorf(CodeInvalidConfig, "decode %s request: %w", r.URL.Path, err)
		}
	}
	if err := (*req).Validate(); err != nil {
		return Errorf(CodeInvalidConfig, "invalid %s request: %w", r.URL.Path, err)
	}
	return nil
}

// safeCall calls the Handler, turning a panic into an error so that the plugin gets an
// answer it can show.
func safeCall[Req request](ctx context.Context, op string, req Req, call func(context.Context, Req) (any, error)) (out any, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, Errorf(CodeInternal, "kovs-agent failed serving %s: panic: %v", op, p)
		}
	}()
	return call(ctx, req)
}

// logFailure logs a failed request: at Info when the plugin is told to try again later
// (expected while the agent starts or a pod's policy is on its way), else at Warn.
func logFailure(log logrus.FieldLogger, e *Error) {
	entry := log.WithField("code", e.Code).WithError(e)
	if e.Details != "" {
		entry = entry.WithField("details", e.Details)
	}
	if e.Code == CodeTryAgainLater {
		entry.Info("CNI request failed")
		return
	}
	entry.Warn("CNI request failed")
}

// requestFields are the log fields that say which pod or sandbox a request is about.
func requestFields(req any) logrus.Fields {
	switch r := req.(type) {
	case AddRequest:
		return logrus.Fields{"pod": r.Pod.String(), "container": r.ContainerID, "port": r.HostIfName}
	case AttachRequest:
		return logrus.Fields{"pod": r.Pod.String(), "container": r.ContainerID, "port": r.HostIfName}
	case DetachRequest:
		return logrus.Fields{"pod": r.Pod.String(), "container": r.ContainerID}
	case GCRequest:
		return logrus.Fields{"valid": len(r.ValidAttachments)}
	default:
		return logrus.Fields{}
	}
}

// writeError answers e with the status its code maps to.
func writeError(w http.ResponseWriter, e *Error) {
	writeJSON(w, httpStatus(e.Code), e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(&Error{Code: CodeInternal, Msg: fmt.Sprintf("kovs-agent could not encode its answer: %v", err)})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
