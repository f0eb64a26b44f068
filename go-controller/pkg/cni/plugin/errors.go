package plugin

import (
	"errors"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
)

// codedError gives err the CNI code the runtime should see.
type codedError struct {
	code uint
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

func withCode(code uint, err error) error { return &codedError{code: code, err: err} }

// cniError turns what a command returned into the CNI error the runtime gets: the whole
// message (every step's context), the code the plugin gave it (else the agent's, else
// 999), and the agent's details.
func cniError(err error) error {
	if err == nil {
		return nil
	}
	out := &types.Error{Code: types.ErrInternal, Msg: err.Error()}
	var te *types.Error
	if errors.As(err, &te) {
		if te.Error() == err.Error() {
			return te
		}
		out.Code, out.Details = te.Code, te.Details
	}
	var agent *cni.Error
	if errors.As(err, &agent) {
		out.Code, out.Details = uint(agent.Code), agent.Details
	}
	var coded *codedError
	if errors.As(err, &coded) {
		out.Code = coded.code
	}
	return out
}
