package stream

import (
	"context"
	"sync"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// Source is where the server takes each node's share from: the policy compiler.
// Watch returns the node's share now and the deltas that follow it, each from the
// generation of the previous one; the channel closes after cancel, or when the source
// stops.
type Source interface {
	Watch(ctx context.Context, node string) (policy.NodeShare, <-chan policy.Delta, func(), error)
}

// Reports receives the generations the agents report realized.
type Reports interface {
	Realized(node string, generation uint64)
}

// Rebase returns src with base added to every generation. The controller rebases its
// compiler's generations (which start again from zero when it starts) onto the time it
// started leading, so that the generations a node sees only ever grow.
func Rebase(src Source, base uint64) Source {
	if base == 0 {
		return src
	}
	return rebased{src: src, base: base}
}

type rebased struct {
	src  Source
	base uint64
}

func (r rebased) Watch(ctx context.Context, node string) (policy.NodeShare, <-chan policy.Delta, func(), error) {
	share, deltas, cancel, err := r.src.Watch(ctx, node)
	if err != nil {
		return share, nil, nil, err
	}
	share.Generation += r.base
	out := make(chan policy.Delta)
	done := make(chan struct{})
	var once sync.Once
	go func() {
		defer close(out)
		for d := range deltas {
			d.FromGeneration += r.base
			d.Generation += r.base
			select {
			case out <- d:
			case <-done:
				return
			}
		}
	}()
	return share, out, func() { once.Do(func() { close(done); cancel() }) }, nil
}
