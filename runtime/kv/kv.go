package kv

import (
	"fmt"

	"github.com/archgen/archgen/runtime/mlx"
)

// Cache is one attention layer's keys and values across steps.
type Cache interface {
	// Offset is the number of positions processed so far: the rope
	// position of the next token.
	Offset() int
	// Update stores the keys and values of L new positions ([B, Hkv, L, D])
	// and returns what attention reads: every position the step's queries
	// may see, in the order the cache's masks assume. The arrays are valid
	// until the cache's next Update or Free. A failed step (bad shapes, an
	// unsupported quantization) fails g and leaves the cache as it was.
	Update(g *mlx.Graph, keys, values *mlx.Array) KV
	// Mask is the attention mask for the next n queries against this
	// cache, as mlx-lm's make_mask gives it: window > 0 limits each query to
	// that many positions; forceArray asks for an explicit array where the
	// "causal" mode would do (attention written out by hand needs one).
	Mask(g *mlx.Graph, n, window int, forceArray bool) mlx.AttentionMask
	// Trim drops the last n positions (at most Offset) and returns how many
	// it dropped; 0 when the cache cannot be trimmed (see Trimmable).
	Trim(n int) int
	// Trimmable reports whether Trim can drop positions now.
	Trimmable() bool
	// Nbytes is the size of the arrays the cache holds.
	Nbytes() int
	// Free releases the cache's arrays; the cache is empty afterwards.
	Free()
}

// Rows is one layer's cache over a batch of sequences, each a row, which
// join (Extend) and leave (Filter, Extract) between steps: Batched for
// attention, States for a recurrent layer. MergeRows makes one.
type Rows interface {
	Cache
	// Rows is the number of sequences.
	Rows() int
	// Extend appends the rows of other, a cache of the same kind, which
	// is left as it was.
	Extend(g *mlx.Graph, other Rows) error
	// Filter keeps the rows keep, in that order.
	Filter(g *mlx.Graph, keep []int) error
	// Extract is row r as a cache of one sequence.
	Extract(g *mlx.Graph, r int) (Cache, error)
	// RowCapacity is the rows the cache holds room for (Rows or more);
	// rows up to it join without the cache growing.
	RowCapacity() int
	// ReserveRows makes room for rows sequences, so that as many join
	// without a copy of the batch each.
	ReserveRows(g *mlx.Graph, rows int) error
}

// rowMerger is a single-sequence cache that knows the batch its kind
// makes.
type rowMerger interface {
	mergeRows(g *mlx.Graph, caches []Cache) (Rows, error)
}

// MergeRows makes a batch of the given caches of one layer, one sequence
// each, in that order: a Batched of Plain and Rotating caches (Merge), a
// States of state caches. The caches are left as they were.
func MergeRows(g *mlx.Graph, caches []Cache) (Rows, error) {
	if len(caches) == 0 {
		return nil, fmt.Errorf("kv: merging no caches")
	}
	m, ok := caches[0].(rowMerger)
	if !ok {
		return nil, fmt.Errorf("kv: a %T cannot be batched", caches[0])
	}
	return m.mergeRows(g, caches)
}

// cloner is a cache that copies itself.
type cloner interface {
	clone(g *mlx.Graph) (Cache, error)
}

// KV is what attention reads from a cache: dense keys and values, or, for a
// quantized cache, their quantized triples (Keys and Values nil).
type KV struct {
	Keys, Values   *mlx.Array
	QKeys, QValues *mlx.Quantized
}

// Step is the growth unit of the caches, in positions, as in mlx-lm: a
// cache holds room for its positions rounded up to a multiple of it.
const Step = 256

const step = Step

// EvalLayers evaluates what caches hold (each cache's State, where it has
// one), one cache after the other in the order given (a model's layers),
// and then more. A prompt chunk whose graph is evaluated so holds about one
// layer's activations at a time: MLX allocates an op's output when it
// queues the op, so a single evaluation of every layer's cache would hold
// those of many layers at once (0.73 MiB a prompt token at the 1B
// Llama-3.2 geometry in float32: 376 MiB for a 512-token chunk, against
// 131 MiB so). The caller closes the chunk's graph first, so that each
// activation is freed once used.
func EvalLayers(caches []Cache, more ...*mlx.Array) error {
	for _, c := range caches {
		s, ok := c.(interface{ State() []*mlx.Array })
		if !ok {
			continue
		}
		if arrs := s.State(); len(arrs) > 0 {
			if err := mlx.Eval(arrs...); err != nil {
				return err
			}
		}
	}
	if len(more) > 0 {
		return mlx.Eval(more...)
	}
	return nil
}
