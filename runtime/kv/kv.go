// Package kv holds the key/value caches generated forward passes attend
// over, and the masks that go with them, with the semantics of mlx-lm's
// cache.py.
//
// A generated model makes one Cache per attention layer (a window cache on
// sliding layers). Each step, attention calls Update with the step's keys
// and values, shaped [B, Hkv, L, D], and attends over the KV it returns,
// through Attention (or Scores and Mix for attention written out by hand).
// Masks come from Mask, asked of the cache before the step's Update, once per
// forward pass and shared by the layers of one kind.
//
// A cache keeps its arrays across graphs: it owns them, and frees the ones a
// step replaces as soon as the step's graph no longer needs its handle, so
// that MLX can write the next step into the same buffer. Close (or Reset)
// each step's graph before building the next for that to happen.
package kv

import (
	"github.com/archgen/archgen/runtime/mlx"
)

// Cache is one attention layer's keys and values across steps.
type Cache interface {
	// Offset is the number of positions processed so far: the rope
	// position of the next token.
	Offset() int
	// Update stores the keys and values of L new positions ([B, Hkv, L, D])
	// and returns what attention reads: every position still held, in
	// order, as arrays of g.
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

// KV is what attention reads from a cache: dense keys and values, or, for a
// quantized cache, their quantized triples (Keys and Values nil).
type KV struct {
	Keys, Values   *mlx.Array
	QKeys, QValues *mlx.Quantized
}

// Attention is softmax(q k^T * scale + mask) v over kv, q shaped
// [B, Hq, L, D]: MLX's fused kernel for dense caches, and attention on the
// quantized keys and values for quantized ones.
func Attention(g *mlx.Graph, q *mlx.Array, kv KV, scale float32, mask mlx.AttentionMask) *mlx.Array {
	if kv.QKeys != nil {
		return quantizedAttention(g, q, kv, scale, mask)
	}
	return g.SDPA(q, kv.Keys, kv.Values, scale, mask)
}

// step is the growth unit of the caches, in positions, as in mlx-lm.
const step = 256
