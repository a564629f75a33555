package kv

import (
	"github.com/archgen/archgen/runtime/mlx"
)

// Encoding stands in for the caches of an encoder (structure.encoder): an
// encoder reads its whole input in one forward pass, every position
// attending to every other, so nothing is kept between steps. Update hands
// the step's keys and values straight to attention, and Mask lets each
// query see every key of its own row: all of them, or, where the rows of
// a batch are padded after their ends, those before the row's length. It
// also carries each token's type (the segment of a pair of texts, which
// BERT-style embeddings add a row for).
//
// One Encoding serves every layer of a run; it holds no arrays and is not
// reused across runs of other inputs (make one per batch).
type Encoding struct {
	lengths []int
	types   []int32
}

// NewEncoding is the encoder context of a batch whose row r holds
// lengths[r] tokens followed by padding (nil: every row is all tokens),
// with types the [B, L] token types in row order (nil: every token of type
// 0).
func NewEncoding(lengths []int, types []int32) *Encoding {
	return &Encoding{lengths: lengths, types: types}
}

// Lengths are the rows' lengths (nil: every row is whole).
func (c *Encoding) Lengths() []int { return c.lengths }

// Types are the tokens' types, [B, L] in row order (nil: all 0).
func (c *Encoding) Types() []int32 { return c.types }

// Offset is 0: an encoder's input starts at position 0.
func (c *Encoding) Offset() int { return 0 }

// Update returns keys and values as they are; nothing is stored.
func (c *Encoding) Update(g *mlx.Graph, keys, values *mlx.Array) KV {
	return KV{Keys: keys, Values: values}
}

// Mask is the mask of n queries over the n keys of the same input, every
// query seeing every key: none where the rows are whole, else the boolean
// [B, 1, 1, n] true before each row's length. window > 0 bounds each query
// to the keys within window/2 positions either side (a local layer of an
// encoder: ModernBERT's and EmbeddingGemma's sliding layers), which is an
// array [B or 1, 1, n, n].
func (c *Encoding) Mask(g *mlx.Graph, n, window int, forceArray bool) mlx.AttentionMask {
	if g.Err() != nil {
		return mlx.NoMask
	}
	if c.lengths == nil && window <= 0 && !forceArray {
		return mlx.NoMask
	}
	rows := max(len(c.lengths), 1)
	half := window / 2
	m := make([]bool, rows*n*n)
	for r := range rows {
		end := n
		if c.lengths != nil {
			end = min(c.lengths[r], n)
		}
		for i := range n {
			for j := range end {
				if window > 0 && (j < i-half || j > i+half) {
					continue
				}
				m[(r*n+i)*n+j] = true
			}
		}
	}
	return mlx.MaskArray(mlx.FromSlice(g, m, rows, 1, n, n))
}

// Trim drops nothing: an Encoding holds no positions.
func (c *Encoding) Trim(int) int { return 0 }

// Trimmable is false.
func (c *Encoding) Trimmable() bool { return false }

// Nbytes is 0: nothing is held.
func (c *Encoding) Nbytes() int { return 0 }

// Free does nothing.
func (c *Encoding) Free() {}
